"""Figures from duet's HDF5 files (read with duet_h5). One function per kind of figure; each returns
the figure and the DataFrame it plotted, so that a notebook can check the plot against the file.

    import duet_h5, duet_plots
    fig, data = duet_plots.memory_split(duet_h5.sweep_table("memory_split.h5", "memory_split"))

Needs matplotlib (Debian: python3-matplotlib) besides duet_h5's h5py, numpy and pandas.
"""
import sys

import numpy as np
import pandas as pd
import matplotlib

# Scripts draw headless; a notebook's kernel keeps its inline backend, so that figures show.
if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"figure.dpi": 110, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3})


def finished_points(table):
    """A sweep_table without its failed points (which have no numbers)."""
    return table[~table["failed"]] if "failed" in table else table


def memory_split(table, total=None):
    """Problems/s against the LLM's gpu_memory_utilization (the PRM has `total` minus it; default:
    the two shares of a finished point), with both models' tokens/s below it (the thesis's figure
    6.1). A failed point is a dotted red line across the panels, not a point."""
    finished = finished_points(table)
    failed = table.drop(finished.index)
    t = finished.sort_values("point.llm_util").reset_index(drop=True)
    if total is None and len(t):
        total = round(float(t["llm.gpu_memory_utilization"].iloc[0] + t["prm.gpu_memory_utilization"].iloc[0]), 6)
    data = pd.DataFrame({
        "llm_util": t["point.llm_util"], "problems_per_s": t["problems_per_s"],
        "llm_tokens_per_s": t["llm.generated_tokens_per_s"],
        # The PRM generates nothing: its work is the prompt tokens it scores.
        "prm_tokens_per_s": t["prm.prompt_tokens"] / t["makespan_s"],
        "llm_preemptions": t["llm.preemptions"], "prm_evictions": t["prm.evictions"]})
    fig, axes = plt.subplots(3, 1, figsize=(7, 6.5), sharex=True)
    panels = (("problems_per_s", "problems/s", "black", 1), ("llm_tokens_per_s", "LLM generated\ntokens/s", "tab:blue", 1),
              ("prm_tokens_per_s", "PRM scored\ntokens/s (thousands)", "tab:orange", 1e3))
    for ax, (column, label, color, scale) in zip(axes, panels):
        ax.plot(data["llm_util"], data[column] / scale, "o-", color=color)
        ax.set_ylabel(label)
        for u in failed["point.llm_util"]:
            ax.axvline(u, color="tab:red", ls=":", lw=1)
    if len(failed):
        axes[0].annotate(f"{len(failed)} failed point{'s' if len(failed) > 1 else ''} (dotted)",
                         (0.01, 0.04), xycoords="axes fraction", color="tab:red", fontsize=8)
    for _, row in data[data["llm_preemptions"] > 0].iterrows():
        axes[0].annotate(f"{int(row['llm_preemptions'])} LLM preemptions", (row["llm_util"], row["problems_per_s"]),
                         textcoords="offset points", xytext=(8, -4), fontsize=8)
    if len(data) and data["prm_evictions"].max() > 0:
        worst = data.loc[data["prm_evictions"].idxmax()]
        axes[2].annotate(f"{int(worst['prm_evictions'])} PRM blocks evicted",
                         (worst["llm_util"], worst["prm_tokens_per_s"] / 1e3),
                         textcoords="offset points", xytext=(-150, 0), fontsize=8)
    share = "" if total is None else f" (the PRM has {total:g} minus it)"
    axes[-1].set_xlabel("LLM gpu_memory_utilization" + share)
    axes[0].set_title("Beam-search throughput against the memory split")
    fig.tight_layout()
    return fig, data


def kv_blocks(steps, total_blocks, title):
    """An engine's KV blocks at every scheduling step: in use by sequences, and holding the prefix
    cache (used or free), with the steps that evicted cached blocks marked (the thesis's figures
    6.2 and 6.3). A full pool of cached blocks is the pressure: a new prefix evicts an old one."""
    data = pd.DataFrame({"step": np.arange(len(steps)), "kv_blocks_used": steps["kv_blocks_used"].to_numpy(),
                         "kv_blocks_cached": steps["kv_blocks_cached"].to_numpy(),
                         "evictions": steps["evictions"].to_numpy()})
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(data["step"], data["kv_blocks_used"], lw=0.8, color="tab:blue", label="in use by sequences")
    ax.plot(data["step"], data["kv_blocks_cached"], lw=0.8, color="tab:green", label="holding the prefix cache")
    ax.axhline(total_blocks, color="gray", ls="--", lw=1, label=f"pool: {total_blocks} blocks")
    evicting = data[data["evictions"] > 0]
    ax.scatter(evicting["step"], evicting["kv_blocks_cached"], s=6, color="tab:red", zorder=3,
               label=f"steps that evicted ({int(data['evictions'].sum())} blocks in all)")
    ax.set_xlabel("scheduling step")
    ax.set_ylabel("KV blocks")
    ax.set_ylim(0, 1.12 * total_blocks)
    ax.set_title(title)
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    return fig, data


def heatmap(table, value, title, rows="point.max_num_seqs", columns="point.max_num_batched_tokens"):
    """`value` over a two-parameter sweep, as an annotated heatmap (the thesis's figures 6.4, 6.5).
    A failed point keeps its cell, blank and marked "failed"."""
    data = table.pivot_table(index=rows, columns=columns, values=value, aggfunc="first", dropna=False).sort_index()
    data = data.reindex(index=sorted(table[rows].unique()), columns=sorted(table[columns].unique()))
    fig, ax = plt.subplots(figsize=(6, 4))
    image = ax.imshow(np.ma.masked_invalid(data.to_numpy(dtype=float)), cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(data.columns)), [str(int(c)) for c in data.columns])
    ax.set_yticks(range(len(data.index)), [str(int(i)) for i in data.index])
    ax.set_xlabel(columns.removeprefix("point."))
    ax.set_ylabel(rows.removeprefix("point."))
    ax.grid(False)
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            v = data.iat[i, j]
            if np.isnan(v):
                ax.text(j, i, "failed", ha="center", va="center", fontsize=8, color="tab:red")
                continue
            # Dark text on the colour map's light end (viridis is light at its top).
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if image.norm(v) > 0.6 else "white")
    fig.colorbar(image, ax=ax, label=value.replace("_per_s", "/s").replace("_", " "))
    ax.set_title(title)
    fig.tight_layout()
    return fig, data


def latency_cdfs(requests):
    """CDFs of TTFT, TPOT and end-to-end latency of the finished requests, in seconds."""
    r = requests[requests["finish_reason"] != 4]  # 4: Aborted, released unfinished (no latencies)
    decoded = r["output_tokens"] > 1
    data = {
        "ttft_s": np.sort((r["first_token_s"] - r["arrival_s"]).to_numpy()),
        "tpot_s": np.sort(((r["finish_s"] - r["first_token_s"])[decoded] / (r["output_tokens"][decoded] - 1)).to_numpy()),
        "e2e_s": np.sort((r["finish_s"] - r["arrival_s"]).to_numpy()),
    }
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    for ax, (name, values) in zip(axes, data.items()):
        ax.plot(values, np.arange(1, len(values) + 1) / max(len(values), 1), lw=1.2)
        ax.set_xscale("log")
        ax.set_xlabel(f"{name.removesuffix('_s').upper()} (s)")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1)
    fig.suptitle("Latency distributions")
    fig.tight_layout()
    return fig, data


def queue_and_kv(steps, total_blocks, backend="sim"):
    """Waiting and running sequences, and KV utilisation, against the run's clock (the run's
    `backend` attribute says which: simulated, or a real engine's)."""
    data = pd.DataFrame({"start_s": steps["start_s"], "num_waiting": steps["num_waiting"],
                         "num_running": steps["num_running"], "kv_utilisation": steps["kv_blocks_used"] / total_blocks})
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 4.5), sharex=True)
    top.plot(data["start_s"], data["num_waiting"], lw=0.8, label="waiting")
    top.plot(data["start_s"], data["num_running"], lw=0.8, label="running")
    top.set_ylabel("sequences")
    top.legend(loc="upper right", fontsize=8)
    bottom.plot(data["start_s"], 100 * data["kv_utilisation"], lw=0.8, color="tab:green")
    bottom.set_ylabel("KV blocks in use (%)")
    bottom.set_ylim(0, 105)
    bottom.set_xlabel("simulated time (s)" if backend == "sim" else f"time on the {backend} engine (s)")
    fig.suptitle("Queue and KV cache over the run")
    fig.tight_layout()
    return fig, data


def predicted_vs_measured(points, unit):
    """Predicted against measured throughput per point, with y = x and the 5% and 10% bands."""
    data = points[["label", "measured_throughput", "predicted_throughput"]].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(5, 5))
    hi = 1.15 * max(data["measured_throughput"].max(), data["predicted_throughput"].max())
    x = np.array([0, hi])
    ax.plot(x, x, color="black", lw=1, label="predicted = measured")
    for band, alpha in ((0.05, 0.25), (0.10, 0.12)):
        ax.fill_between(x, x * (1 - band), x * (1 + band), color="tab:blue", alpha=alpha, lw=0,
                        label=f"within {int(100 * band)}%")
    ax.scatter(data["measured_throughput"], data["predicted_throughput"], color="tab:red", zorder=3, label="points")
    # Only the worst point is named: the labels of close points would overlap.
    worst = (data["predicted_throughput"] / data["measured_throughput"] - 1).abs().idxmax()
    row = data.loc[worst]
    ax.annotate(f"worst: {row['label']}", (row["measured_throughput"], row["predicted_throughput"]), fontsize=7,
                textcoords="offset points", xytext=(-10, 10), ha="right")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_xlabel(f"measured ({unit})")
    ax.set_ylabel(f"predicted ({unit})")
    ax.set_title("Predicted against measured throughput")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig, data


def step_errors(predicted_steps, measured_steps, engine):
    """The distribution of per-step relative errors of the step span (duration + host time), for
    two runs whose batches are the same step for step."""
    n = min(len(predicted_steps), len(measured_steps))
    span = lambda s: (s["duration_s"] + s["host_s"]).to_numpy()[:n]  # noqa: E731
    data = pd.DataFrame({"error": span(predicted_steps) / span(measured_steps) - 1})
    fig, ax = plt.subplots(figsize=(6, 3.5))
    clipped = np.clip(100 * data["error"], -100, 100)
    ax.hist(clipped, bins=60, color="tab:blue")
    ax.axvline(0, color="black", lw=1)
    ax.set_xlabel("predicted / measured - 1 per step (%, clipped at +-100)")
    ax.set_ylabel("steps")
    ax.set_title(f"{engine}: per-step error, median {100 * data['error'].median():+.1f}%")
    fig.tight_layout()
    return fig, data


def kv_over_time(predicted_steps, measured_steps, engine, total_blocks):
    """An engine's KV blocks in use against time, predicted and measured, for two runs whose batches
    are the same step for step (duet validate checks it): the curves hold the same blocks at every
    step, so where they part in time is where the step times differ (the thesis's figures 6.2 and
    6.3 drawn twice)."""
    n = min(len(predicted_steps), len(measured_steps))
    data = pd.DataFrame({"predicted_s": predicted_steps["start_s"].to_numpy()[:n],
                         "measured_s": measured_steps["start_s"].to_numpy()[:n],
                         "kv_blocks_used": measured_steps["kv_blocks_used"].to_numpy()[:n]})
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(data["measured_s"], data["kv_blocks_used"], lw=0.9, color="tab:blue", label="measured")
    ax.plot(data["predicted_s"], data["kv_blocks_used"], lw=0.9, color="tab:orange", ls="--", label="predicted")
    ax.axhline(total_blocks, color="gray", ls=":", lw=1, label=f"pool: {total_blocks} blocks")
    ax.set_xlabel("time since the run began (s)")
    ax.set_ylabel("KV blocks in use")
    ax.set_ylim(0, 1.12 * total_blocks)
    end_error = data["predicted_s"].iloc[-1] / data["measured_s"].iloc[-1] - 1 if n > 1 else 0.0
    ax.set_title(f"{engine}: KV blocks in use over time (last step starts {100 * end_error:+.1f}% off)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig, data


def allocator_comparison(runs):
    """Paged against naive allocation (scripts/paged_vs_naive.lua). `runs`: (allocator, problems in
    flight, run) triples, the run as duet_h5.load_run gives it. Three panels per batch size:
    throughput, the most sequences running at once (what the allocator fits in the same memory),
    and token utilisation, the share of reserved KV slots that hold a token. The table beside it has
    the mean KV blocks per running sequence: best-of-N samples share their prompt's blocks when
    paged, and each reserves max_model_len when naive."""
    rows = []
    for allocator, concurrency, run in runs:
        llm = run["engines"]["llm"]
        steps, block_size = llm["steps"], llm["attrs"]["block_size"]
        busy = steps[steps["num_running"] > 0]
        rows.append({"allocator": allocator, "concurrency": concurrency,
                     "problems_per_s": run["attrs"]["problems_per_s"],
                     "peak_running": int(steps["num_running"].max()),
                     "token_utilisation": steps["kv_filled_tokens"].sum() / max(1, (steps["kv_blocks_used"] * block_size).sum()),
                     "blocks_per_running_seq": (busy["kv_blocks_used"] / busy["num_running"]).mean()})
    data = pd.DataFrame(rows).sort_values(["concurrency", "allocator"]).reset_index(drop=True)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    panels = (("problems_per_s", "problems/s", 1), ("peak_running", "most sequences running at once", 1),
              ("token_utilisation", "reserved KV slots holding a token (%)", 100))
    sizes = sorted(data["concurrency"].unique())
    allocators = sorted(data["allocator"].unique())
    width = 0.8 / len(allocators)
    for ax, (column, label, scale) in zip(axes, panels):
        for k, allocator in enumerate(allocators):
            # A point that failed (or another shard's) has no bar.
            part = data[data["allocator"] == allocator].set_index("concurrency").reindex(sizes)
            ax.bar(np.arange(len(sizes)) + k * width, scale * part[column], width, label=allocator)
        ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2, [str(int(c)) for c in sizes])
        ax.set_xlabel("problems in flight")
        ax.set_ylabel(label)
    axes[0].legend(title="allocator", fontsize=8)
    fig.suptitle("Paged against naive KV allocation, same memory")
    fig.tight_layout()
    return fig, data


def save(fig, directory, name):
    """Writes the figure as DIRECTORY/NAME.png when a directory is given (scripts/figures.sh)."""
    if directory:
        import os

        os.makedirs(directory, exist_ok=True)
        fig.savefig(os.path.join(directory, name + ".png"), bbox_inches="tight")
