/* Functions compiled for both the host and, under nvcc, the device. */
#ifndef DCP_BASE_HD_H
#define DCP_BASE_HD_H

#if defined(__CUDACC__)
#define DCP_HD static inline __host__ __device__
#else
#define DCP_HD static inline
#endif

#endif
