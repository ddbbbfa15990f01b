#pragma once
// Host + device functions in headers that include no CUDA header: the qualifiers appear only when
// nvcc compiles them, so the host build (and the CPU engine) uses the very same code.
#if defined(__CUDACC__)
#define DUET_HOST_DEVICE __host__ __device__
#else
#define DUET_HOST_DEVICE
#endif
