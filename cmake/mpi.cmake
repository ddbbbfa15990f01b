# MPI is optional: without it `duet run` still shards a sweep (--shard I/N) and merges the shards
# (duet merge); with it, `mpirun -n N duet run` hands a sweep's points to N ranks. Only cli/ links it.
set(DUET_HAVE_MPI OFF)
if(NOT DUET_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(DUET_HAVE_MPI ON)
  elseif(DUET_MPI STREQUAL "ON")
    message(FATAL_ERROR "DUET_MPI=ON but no MPI was found (Debian: apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()
message(STATUS "duet: MPI ${DUET_HAVE_MPI}")
