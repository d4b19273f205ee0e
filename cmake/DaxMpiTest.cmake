# dax_add_mpi_test(NAME <name> TARGET <target> RANKS <n>... [TIMEOUT <s>] [ARGS ...])
# Registers one ctest per rank count, run under mpiexec. Running as root and more ranks than
# cores are allowed here, for the test suite only, so a user never has to set them.
function(dax_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TARGET;TIMEOUT" "RANKS;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  foreach(n IN LISTS T_RANKS)
    set(test_name ${T_NAME}.np${n})
    add_test(NAME ${test_name}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} --oversubscribe
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${T_TARGET}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    set_tests_properties(${test_name} PROPERTIES
      TIMEOUT ${T_TIMEOUT}
      PROCESSORS 1
      LABELS "mpi"
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;DAX_CHECK_COLLECTIVES=1;OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
  endforeach()
endfunction()
