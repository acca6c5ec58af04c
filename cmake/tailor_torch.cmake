# Finds LibTorch in the project's Python environment (scripts/setup makes it
# and links it as .venv) and defines the imported target `tailor_torch`,
# which the runner links PRIVATE.
#
#   TAILOR_CUDA=ON   the CUDA build: LibTorch's own TorchConfig.cmake, found
#                    through torch.utils.cmake_prefix_path, with torch_cuda,
#                    c10_cuda and NCCL; it needs the CUDA toolkit whose major
#                    version matches the wheel's (torch.version.cuda).
#   TAILOR_CUDA=OFF  the CPU-only build: libtorch_cpu and libc10 of the same
#                    wheel, imported directly, because TorchConfig.cmake of a
#                    CUDA wheel refuses to configure without a toolkit. (The
#                    wheel's libtorch_cpu still loads the CUDA runtime it
#                    carries in the venv; no toolkit is needed.)
# Default: ON where a toolkit is found, OFF with a notice otherwise.
# Defines TAILOR_CUDA=1|0 for the runner's sources.

set(TAILOR_VENV "${PROJECT_SOURCE_DIR}/.venv" CACHE PATH "The Python environment that holds LibTorch (scripts/setup)")
set(_python "${TAILOR_VENV}/bin/python")
if(NOT EXISTS "${_python}")
  message(FATAL_ERROR "Tailor: no Python environment at ${TAILOR_VENV}; run scripts/setup "
    "(or make build), which installs LibTorch from PyPI into it.")
endif()
execute_process(
  COMMAND "${_python}" -c "import torch, torch.utils; print(torch.__version__); print(torch.version.cuda or ''); print(torch.utils.cmake_prefix_path); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  OUTPUT_VARIABLE _torch_info ERROR_VARIABLE _torch_err RESULT_VARIABLE _torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "Tailor: ${_python} cannot import torch; run scripts/setup.\n${_torch_err}")
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 TAILOR_TORCH_VERSION)
list(GET _torch_info 1 TAILOR_TORCH_CUDA)
list(GET _torch_info 2 _torch_prefix)
list(GET _torch_info 3 _torch_abi)
get_filename_component(_torch_root "${_torch_prefix}/../.." ABSOLUTE)

if(NOT DEFINED TAILOR_CUDA)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TAILOR_TORCH_CUDA)
    set(_cuda_default ON)
  else()
    set(_cuda_default OFF)
    message(STATUS "Tailor: no CUDA toolkit found (or a CPU-only torch): building without CUDA")
  endif()
  set(TAILOR_CUDA ${_cuda_default} CACHE BOOL "Build the runner's CUDA path (needs the CUDA toolkit)")
endif()

# The wheel's CPU libraries (libtorch_cpu, libc10) as the imported target
# `target`, for sources built with TAILOR_CUDA=0: the CPU-only build, and in
# a CUDA build the runner's CPU-only variant that build_without_cuda checks.
function(tailor_import_cpu_torch target)
  set(_lib "${_torch_root}/lib")
  foreach(_name c10 torch_cpu)
    if(NOT EXISTS "${_lib}/lib${_name}.so")
      message(FATAL_ERROR "Tailor: ${_lib}/lib${_name}.so is missing; the torch in ${TAILOR_VENV} is incomplete.")
    endif()
  endforeach()
  find_package(Threads REQUIRED)
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  target_include_directories(${target} SYSTEM INTERFACE
    "${_torch_root}/include" "${_torch_root}/include/torch/csrc/api/include")
  target_link_libraries(${target} INTERFACE
    "${_lib}/libtorch_cpu.so" "${_lib}/libc10.so" Threads::Threads)
  # The definitions libtorch_cpu was built with (its distributed and RPC
  # parts), as the wheel's own CMake export declares them: LibTorch's headers
  # lay out some classes by them (the JIT interpreter's continuation), so a
  # TU compiled without them disagrees with the library.
  set(_targets "${_torch_root}/share/cmake/Caffe2/Caffe2Targets.cmake")
  file(READ "${_targets}" _targets_text)
  if(NOT _targets_text MATCHES "set_target_properties\\(torch_cpu PROPERTIES[^)]*INTERFACE_COMPILE_DEFINITIONS \"([^\"]*)\"")
    message(FATAL_ERROR "Tailor: ${_targets} declares no compile definitions for torch_cpu; the torch in ${TAILOR_VENV} is not one this build knows.")
  endif()
  set(_cpu_definitions "${CMAKE_MATCH_1}")
  target_compile_definitions(${target} INTERFACE TAILOR_CUDA=0 _GLIBCXX_USE_CXX11_ABI=${_torch_abi} ${_cpu_definitions})
  # The wheel's libraries find each other (and its libgomp) by RUNPATH.
  set_target_properties(${target} PROPERTIES INTERFACE_LINK_OPTIONS "-Wl,-rpath,${_lib}")
  # The wheel's libraries are built with a newer GCC than Debian's and export
  # the parts of its libstdc++ they link statically (std::filesystem among
  # them). Loaded ahead of libstdc++.so.6, they would take over those symbols
  # for the whole process, and their std::filesystem::remove_all crashes here.
  # Naming libstdc++ before everything else puts it first in the executable's
  # DT_NEEDED, and so first in the symbol lookup order.
  target_link_options(${target} INTERFACE "-Wl,--no-as-needed" "-lstdc++")
endfunction()

if(TAILOR_CUDA)
  if(NOT TAILOR_TORCH_CUDA)
    message(FATAL_ERROR "Tailor: TAILOR_CUDA=ON, but torch ${TAILOR_TORCH_VERSION} in ${TAILOR_VENV} is a CPU-only build.")
  endif()
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR "Tailor: TAILOR_CUDA=ON, but no CUDA toolkit was found (nvcc and the CUDA ${TAILOR_TORCH_CUDA} "
      "headers and libraries). Install it, put nvcc on PATH, or configure with -DTAILOR_CUDA=OFF.")
  endif()
  string(REGEX MATCH "^[0-9]+" _torch_cuda_major "${TAILOR_TORCH_CUDA}")
  if(NOT CUDAToolkit_VERSION_MAJOR STREQUAL _torch_cuda_major)
    message(FATAL_ERROR "Tailor: torch ${TAILOR_TORCH_VERSION} is built for CUDA ${TAILOR_TORCH_CUDA}, but the toolkit "
      "at ${CUDAToolkit_BIN_DIR} is CUDA ${CUDAToolkit_VERSION}. Install the CUDA ${_torch_cuda_major} toolkit "
      "(or point CUDAToolkit_ROOT at it), or configure with -DTAILOR_CUDA=OFF.")
  endif()
  # Name the architectures instead of letting Caffe2's cmake probe for a GPU
  # (and warn that it found none); the runner's own kernels set theirs
  # (runner/CMakeLists.txt).
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  # Caffe2's cmake enables the CUDA language, which on a first configure
  # sets CMAKE_CUDA_ARCHITECTURES to nvcc's default, and then warns that it
  # ignores that variable. Enabled here first, the variable is gone before
  # Caffe2 looks (the runner's kernels name their architectures).
  enable_language(CUDA)
  unset(CMAKE_CUDA_ARCHITECTURES CACHE)
  unset(CMAKE_CUDA_ARCHITECTURES)
  # The wheel links kineto (the profiler) into libtorch_cpu; TorchConfig
  # looks for a separate library and warns when there is none.
  set(kineto_LIBRARY "${_torch_root}/lib/libtorch_cpu.so" CACHE FILEPATH "kineto, inside libtorch_cpu")
  list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
  find_package(Torch REQUIRED)
  add_library(tailor_torch INTERFACE IMPORTED GLOBAL)
  # torch carries torch_cpu and torch_cuda; torch_cuda is linked with
  # --no-as-needed by TorchConfig, so the runner always loads it.
  target_link_libraries(tailor_torch INTERFACE torch)
  target_compile_definitions(tailor_torch INTERFACE TAILOR_CUDA=1)
  # libstdc++ first, as tailor_import_cpu_torch says.
  target_link_options(tailor_torch INTERFACE "-Wl,--no-as-needed" "-lstdc++")
  # The runner's CPU-only variant, built by the build_without_cuda test only.
  tailor_import_cpu_torch(tailor_torch_cpu)
else()
  tailor_import_cpu_torch(tailor_torch)
endif()
# Where an installed tailor-runner finds LibTorch: the environment's real
# folder. .venv is a link inside the source tree, so CMake's
# INSTALL_RPATH_USE_LINK_PATH takes it for a build path and drops it.
file(REAL_PATH "${_torch_root}/lib" TAILOR_TORCH_LIBDIR)
set(TAILOR_TORCH_LIBDIR "${TAILOR_TORCH_LIBDIR}" CACHE INTERNAL "")
message(STATUS "Tailor: torch ${TAILOR_TORCH_VERSION} from ${_torch_root}, CUDA path ${TAILOR_CUDA}")
