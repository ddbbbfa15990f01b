# Outputs: never the input, checked before the work, and recorded in the run file's command line.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
configure_file(${SRC}/scripts/quickstart.lua ${OUT}/copy.lua COPYONLY)
file(SHA256 ${OUT}/copy.lua before)
execute_process(COMMAND ${DUET} run ${OUT}/copy.lua --out ${OUT}/copy.lua -- --problems 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(SHA256 ${OUT}/copy.lua after)
if(rc EQUAL 0 OR NOT "${err}" MATCHES "copy.lua is the input .*copy.lua: refusing to overwrite it" OR NOT before STREQUAL after)
  message(FATAL_ERROR "duet run --out SCRIPT must refuse and leave the script alone: rc ${rc}, ${err}")
endif()

execute_process(COMMAND ${DUET} run ${SRC}/scripts/quickstart.lua --no-progress --out ${OUT}/cl.h5 -- --problems 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "duet run failed: ${err}")
endif()
execute_process(COMMAND /usr/bin/python3 -c "import h5py, sys; print(h5py.File(sys.argv[1])['runs/0000'].attrs['command_line'])"
                ${OUT}/cl.h5 RESULT_VARIABLE rc OUTPUT_VARIABLE line ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT "${line}" MATCHES "duet run .*quickstart.lua --no-progress --out .*cl.h5 -- --problems 1")
  message(FATAL_ERROR "the recorded command_line is not the command: '${line}' ${err}")
endif()
message("outputs: refused to overwrite the script; command_line '${line}'")
