# Finds the CUDA toolkit (nvcc, cuBLAS, NCCL) and builds kernels/cuda when SUBDP_CUDA allows.
# Sets SUBDP_HAVE_CUDA. The CPU build never needs CUDA.
# SUBDP_CUDA=EMULATE builds kernels/cuda's sources as host C++ against the emulated device of
# kernels/emu (a test device for CI, never chosen by AUTO): SUBDP_CUDA_EMULATED.
set(SUBDP_HAVE_CUDA OFF)
set(SUBDP_CUDA_EMULATED OFF)
if(SUBDP_CUDA STREQUAL "EMULATE")
  # The emulator puts every __shared__ array in one linker section, which it fills with NaN
  # before each block and where ldmatrix must find its rows; GCC places a template kernel's
  # arrays elsewhere, ignoring the attribute (GCC bug 70435), and those checks would pass.
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SUBDP_CUDA=EMULATE needs clang++, not ${CMAKE_CXX_COMPILER_ID} "
                        "${CMAKE_CXX_COMPILER}: configure a fresh build folder with CXX unset (clang++ is then chosen), or pass "
                        "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  set(SUBDP_HAVE_CUDA ON)
  set(SUBDP_CUDA_EMULATED ON)
elseif(NOT SUBDP_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER AND EXISTS ${CMAKE_SOURCE_DIR}/kernels/cuda/CMakeLists.txt)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(SUBDP_HAVE_CUDA ON)
    endif()
  endif()
  if(SUBDP_CUDA STREQUAL "ON" AND NOT SUBDP_HAVE_CUDA)
    message(FATAL_ERROR "SUBDP_CUDA=ON but no usable CUDA toolkit (nvcc, cuBLAS) was found")
  endif()
endif()
if(SUBDP_HAVE_CUDA)
  add_subdirectory(kernels/cuda)
endif()
message(STATUS "subdp CUDA backend: ${SUBDP_HAVE_CUDA} (emulated: ${SUBDP_CUDA_EMULATED})")
