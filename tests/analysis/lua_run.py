"""For the analysis tests that write a Lua script, run it with duet and read its file with h5py:
    h5py, duet, out = lua_run.setup()                # argv: DUET OUT_DIR; exits with SKIP without h5py
    h5 = lua_run.run(duet, out, "name", LUA_TEXT)    # out/name.lua, run into out/name.h5
"""
import os
import subprocess
import sys


def setup():
    try:
        import h5py
    except ImportError as error:
        print(f"SKIP: needs h5py ({error})")
        sys.exit(0)
    duet, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    return h5py, duet, out


def run(duet, out, name, text):
    script, h5 = os.path.join(out, name + ".lua"), os.path.join(out, name + ".h5")
    with open(script, "w") as f:
        f.write(text)
    subprocess.run([duet, "run", script, "--no-progress", "--out", h5], check=True, stdout=subprocess.DEVNULL)
    return h5
