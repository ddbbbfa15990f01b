# The committed H100 and H200 priors are what `duet fit-ops` makes of the public tables: re-fit
# them when the tables are present (they are not in the repository) and price the same batches
# with both. The H200's prefill attention is the H100's table (profiles/README.md), taken at the
# H100's peaks. Skipped (the test's SKIP_REGULAR_EXPRESSION) when the tables are absent.
if(NOT EXISTS "${TABLES}/h100_sxm_vllm0.19.0_gemm_bf16.csv.gz")
  message("SKIP: no kernel tables at ${TABLES}")
  return()
endif()
file(MAKE_DIRECTORY "${OUT}")
set(h100_args "")
set(h200_args --prefill-attention ${TABLES}/h100_sxm_vllm0.19.0_context_attention_bf16.csv)
set(h100_dir h100-sxm)
set(h200_dir h200)
foreach(gpu h100 h200)
  execute_process(COMMAND ${DUET} fit-ops --gpu ${gpu} --tables ${TABLES} ${${gpu}_args} --out ${OUT}/${gpu}.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
  message("${log}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "duet fit-ops --gpu ${gpu} failed")
  endif()
  foreach(batch "--decode-seqs;1;--decode-context;512" "--prefill-tokens;2048"
                "--prefill-tokens;4096;--prefill-seqs;8;--prefill-context;2048" "--decode-seqs;256;--decode-context;4096")
    set(steps "")
    foreach(prior "${OUT}/${gpu}.json" "${SRC}/profiles/${${gpu}_dir}/operator-prior.json")
      execute_process(COMMAND ${DUET} cost --model llama-3.1-8b --gpu ${gpu} --cost-model ${prior} --json ${batch}
                      RESULT_VARIABLE rc OUTPUT_VARIABLE json)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR "duet cost failed with ${prior}")
      endif()
      string(JSON step GET "${json}" step_s)
      list(APPEND steps "${step}")
    endforeach()
    list(GET steps 0 refit)
    list(GET steps 1 committed)
    # The first ten characters (six or more significant digits for steps of 1 to 100 ms): the
    # re-fit must price every batch as the committed prior does.
    string(SUBSTRING "${refit}" 0 10 a)
    string(SUBSTRING "${committed}" 0 10 b)
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "${gpu}: the re-fitted prior prices ${batch} at ${refit} s, the committed one at ${committed} s")
    endif()
    message("${gpu} ${batch}: ${refit} s (re-fit) vs ${committed} s (committed)")
  endforeach()
endforeach()
