# Selects one MPI at configure time. Debian co-installs Open MPI and MPICH
# with suffixed wrappers (mpicc.openmpi, mpicc.mpich); we point FindMPI at
# the chosen one so the other never leaks into the build.
if(LOOM_MPI STREQUAL "openmpi")
  set(_loom_mpicc mpicc.openmpi)
  set(_loom_mpiexec mpirun.openmpi)
elseif(LOOM_MPI STREQUAL "mpich")
  set(_loom_mpicc mpicc.mpich)
  set(_loom_mpiexec mpiexec.mpich)
else()
  message(FATAL_ERROR "LOOM_MPI must be openmpi or mpich, not '${LOOM_MPI}'")
endif()
# LOOM_MPI_PREFIX: an MPI installed apart from the system's (PyPI's mpich
# wheel, for one): its bin/mpicc and bin/mpiexec.
set(LOOM_MPI_PREFIX "" CACHE PATH "An MPI's install prefix (bin/mpicc, bin/mpiexec)")
if(LOOM_MPI_PREFIX)
  set(_loom_mpicc_path ${LOOM_MPI_PREFIX}/bin/mpicc)
  set(_loom_mpiexec_path ${LOOM_MPI_PREFIX}/bin/mpiexec)
else()
  find_program(_loom_mpicc_path ${_loom_mpicc})
  find_program(_loom_mpiexec_path ${_loom_mpiexec})
endif()
if(_loom_mpicc_path)
  set(MPI_C_COMPILER ${_loom_mpicc_path} CACHE FILEPATH "" FORCE)
endif()
if(_loom_mpiexec_path)
  set(MPIEXEC_EXECUTABLE ${_loom_mpiexec_path} CACHE FILEPATH "" FORCE)
endif()
find_package(MPI REQUIRED COMPONENTS C)

# Flags mpiexec needs in containers and on small CI machines.
set(LOOM_MPIEXEC_FLAGS "")
if(LOOM_MPI STREQUAL "openmpi")
  set(LOOM_MPIEXEC_FLAGS --oversubscribe --bind-to none)
endif()

# Loom is C++ but speaks MPI's C interface; keep the deprecated C++ bindings out.
add_compile_definitions(OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
