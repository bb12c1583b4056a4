/* The GPU copy kernels as a fatbin, embedded at build time (cmake/embed.cmake
 * writes the definition into the build tree); length 0 when the library was
 * built without nvcc. */
#ifndef XFER_GPU_FATBIN_H
#define XFER_GPU_FATBIN_H

extern const unsigned char xi_gpu_fatbin[];
extern const unsigned long xi_gpu_fatbin_len;

#endif
