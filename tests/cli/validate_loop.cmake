# profile -> validate (script and trace) -> the HDF5 layout, on the tiny model and the CPU engine.
function(duet)
  execute_process(COMMAND ${DUET} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("duet ${ARGV0}: ${out}${err}")
  set(rc ${rc} PARENT_SCOPE)
  set(out "${out}${err}" PARENT_SCOPE)
endfunction()
# duet ARGS..., and a failure naming WHAT unless it exits 0.
function(duet_ok what)
  duet(${ARGN})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
function(expect what)
  if(NOT "${out}" MATCHES "${what}")
    message(FATAL_ERROR "expected output matching '${what}'")
  endif()
endfunction()

file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
duet_ok("duet profile" profile --backend cpu --model ${TINY} --out ${OUT}/tiny.json --max-num-seqs 8
        --max-num-batched-tokens 128 --max-model-len 1024 --repeats 1)
expect("wrote .*tiny.json and .*tiny.h5")

duet_ok("duet validate (script)" validate ${SRC}/scripts/validation/beam_cpu.lua --backend cpu --profile ${OUT}/tiny.json
        --max-error 0 --no-progress --out ${OUT}/beam.h5 -- --sweeps memory --problems 2 --concurrency 2 --iterations 3)
expect("4 points: median \\|error\\|")
# One KV pool against static splits on the real engine (both engines the tiny model, so one
# profile prices both), and the script's two-model pairing (16/4-token pages) on the simulator.
duet_ok("duet validate (pool sweep)" validate ${SRC}/scripts/validation/beam_cpu.lua --backend cpu --profile ${OUT}/tiny.json
        --max-error 0 --no-progress --out ${OUT}/pool.h5 -- --sweeps pool --problems 2 --concurrency 2 --iterations 3)
expect("pool shared cost .*6 points: median \\|error\\|")
duet_ok("duet run (pool sweep, two models)" run ${SRC}/scripts/validation/beam_cpu.lua --no-progress --out ${OUT}/pool-pair.h5
        -- --sweeps pool --prm-model ${SRC}/models/small-llama/config.json --problems 2 --concurrency 2 --iterations 3)
expect("duet.sweep 'pool': 6 points: 6 ran, 0 failed")

duet_ok("duet validate --trace" validate --trace ${SRC}/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv --backend cpu
        --model ${TINY} --max-requests 3 --max-model-len 4096 --num-gpu-blocks-override 1024 --profile ${OUT}/tiny.json
        --max-error 0 --repeats 2 --out ${OUT}/trace.h5)
expect("TTFT +p50 .*noise +[0-9.]+%.*p90 .*noise +[0-9.]+%")

execute_process(COMMAND /usr/bin/python3 ${TESTS}/check_validate_h5.py ${OUT}/beam.h5 4 ${OUT}/trace.h5
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the validation files do not have the documented layout")
endif()

# Bad input: streams that differ, a profile of another model, a corrupt profile, an error limit.
duet(validate ${TESTS}/data/unforced.lua --backend cpu --profile ${OUT}/tiny.json --out ${OUT}/bad.h5)
expect("token streams differ between the simulator and the real engine: engine 'llm' (step|ran)")
duet(validate ${SRC}/scripts/validation/beam_cpu.lua --backend cpu --profile ${OUT}/tiny.json --out ${OUT}/bad.h5
     -- --model models/small-llama/config.json --sweeps memory --problems 1)
expect("the profile is for model 'duet-tiny-llama'")
file(WRITE ${OUT}/corrupt.json "{\"format\": \"duet-cost-profile/2\", \"device_terms\": [")
duet(validate ${SRC}/scripts/validation/beam_cpu.lua --backend cpu --profile ${OUT}/corrupt.json --out ${OUT}/bad.h5)
expect("corrupt.json: not valid JSON")
duet(validate ${SRC}/scripts/validation/beam_cpu.lua --backend cpu --profile ${OUT}/tiny.json --max-error 0.0000001
     --no-progress --out ${OUT}/limit.h5 -- --sweeps memory --problems 1 --concurrency 1 --iterations 2)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "a point beyond --max-error must exit 1, got ${rc}")
endif()
expect("exceeds --max-error")

# duet fit on a real engine's run: every engine in one call, model and device from the file.
duet(fit --run ${OUT}/beam.h5 --group /validate/points/0000/measured --out ${OUT}/fit.json)
expect("wrote .*fit.llm.json")
expect("wrote .*fit.prm.json")
expect("duet-tiny-llama on cpu-")
duet(fit --run ${OUT}/beam.h5 --out ${OUT}/fit.json)
expect("a simulated run; fit the steps that a real engine measured")
