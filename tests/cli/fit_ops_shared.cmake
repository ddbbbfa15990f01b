# The committed H100 prior is what `duet fit-ops` makes of the public tables: re-fit it when the
# tables are present (they are not in the repository) and price the same batches with both.
# Skipped (the test's SKIP_REGULAR_EXPRESSION) when the tables are absent.
if(NOT EXISTS "${TABLES}/h100_sxm_vllm0.19.0_gemm_bf16.csv.gz")
  message("SKIP: no kernel tables at ${TABLES}")
  return()
endif()
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND ${DUET} fit-ops --gpu h100 --tables ${TABLES} --out ${OUT}/h100.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
message("${log}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "duet fit-ops failed")
endif()
foreach(batch "--decode-seqs;1;--decode-context;512" "--prefill-tokens;2048" "--decode-seqs;256;--decode-context;4096")
  foreach(prior "${OUT}/h100.json" "${SRC}/profiles/h100-sxm/operator-prior.json")
    execute_process(COMMAND ${DUET} cost --model llama-3.1-8b --gpu h100 --cost-model ${prior} --json ${batch}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE json)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "duet cost failed with ${prior}")
    endif()
    string(JSON step GET "${json}" step_s)
    list(APPEND steps "${step}")
  endforeach()
  list(GET steps -2 refit)
  list(GET steps -1 committed)
  # The first eight characters (five or more significant digits): the re-fit must price every
  # batch as the committed prior does.
  string(SUBSTRING "${refit}" 0 8 a)
  string(SUBSTRING "${committed}" 0 8 b)
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "the re-fitted prior prices ${batch} at ${refit} s, the committed one at ${committed} s")
  endif()
  message("${batch}: ${refit} s (re-fit) vs ${committed} s (committed)")
endforeach()
