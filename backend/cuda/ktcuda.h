// ktcuda.h declares the few CUDA driver, NVRTC, cuBLASLt and NCCL types kt
// uses, and the trampolines in ktcuda.c that call through function pointers
// resolved with dlopen/dlsym. No CUDA header is needed to build kt.
#ifndef KTCUDA_H
#define KTCUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

typedef struct ncclComm *ncclComm_t;
// KT_NCCL_CTX_ERROR is what an NCCL trampoline returns when the context
// could not be made current (outside NCCL's own result codes).
#define KT_NCCL_CTX_ERROR 1000

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

typedef int cublasStatus_t;
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
	cublasLtMatmulAlgo_t algo;
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} cublasLtMatmulHeuristicResult_t;

// Library loading. Each returns NULL on success or a static/dlerror message.
const char *kt_load_driver(const char *path);
const char *kt_load_nvrtc(const char *path);
const char *kt_load_cublaslt(const char *path);
const char *kt_load_nccl(const char *path);

// NCCL trampolines (the collectives of tensor parallelism). Those taking
// ctx make it current first; results are ncclResult_t codes.
int kt_ncclGetVersion(int *v);
const char *kt_ncclGetErrorString(int r);
int kt_ncclCommInitAll(ncclComm_t *comms, int n, const int *devs);
int kt_ncclCommDestroy(ncclComm_t c);
int kt_ncclCommAbort(ncclComm_t c);
int kt_ncclAllReduce(CUcontext ctx, CUdeviceptr send, CUdeviceptr recv, size_t count, int dt, int op, ncclComm_t c, CUstream s);
int kt_ncclBroadcast(CUcontext ctx, CUdeviceptr send, CUdeviceptr recv, size_t count, int dt, int root, ncclComm_t c, CUstream s);
int kt_ncclAllGather(CUcontext ctx, CUdeviceptr send, CUdeviceptr recv, size_t count, int dt, ncclComm_t c, CUstream s);

// Driver API trampolines. Those taking ctx make it current on the calling
// OS thread first (goroutines move between threads between cgo calls).
CUresult kt_cuInit(void);
CUresult kt_cuDriverGetVersion(int *v);
CUresult kt_cuDeviceGetCount(int *n);
CUresult kt_cuDeviceGet(CUdevice *d, int ordinal);
CUresult kt_cuDeviceGetName(char *buf, int len, CUdevice d);
CUresult kt_cuDeviceGetAttribute(int *v, int attr, CUdevice d);
CUresult kt_cuDeviceCanAccessPeer(int *v, CUdevice a, CUdevice b);
CUresult kt_cuDeviceTotalMem(size_t *b, CUdevice d);
CUresult kt_cuDeviceGetPCIBusId(char *buf, int len, CUdevice d);
CUresult kt_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult kt_cuDevicePrimaryCtxRelease(CUdevice d);
CUresult kt_cuCtxSynchronize(CUcontext ctx);
CUresult kt_cuMemGetInfo(CUcontext ctx, size_t *free, size_t *total);
CUresult kt_cuMemAlloc(CUcontext ctx, CUdeviceptr *p, size_t n);
CUresult kt_cuMemFree(CUcontext ctx, CUdeviceptr p);
CUresult kt_cuMemHostAlloc(CUcontext ctx, void **p, size_t n, unsigned flags);
CUresult kt_cuMemFreeHost(CUcontext ctx, void *p);
CUresult kt_cuMemHostGetDevicePointer(CUcontext ctx, CUdeviceptr *d, void *p);
CUresult kt_cuMemcpyHtoD(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n);
CUresult kt_cuMemcpyDtoH(CUcontext ctx, void *dst, CUdeviceptr src, size_t n);
CUresult kt_cuMemcpyHtoDAsync(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult kt_cuMemcpyDtoHAsync(CUcontext ctx, void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult kt_cuMemcpyDtoDAsync(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult kt_cuMemsetD8Async(CUcontext ctx, CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
CUresult kt_cuStreamCreate(CUcontext ctx, CUstream *s, unsigned flags);
CUresult kt_cuStreamDestroy(CUcontext ctx, CUstream s);
CUresult kt_cuStreamSynchronize(CUcontext ctx, CUstream s);
CUresult kt_cuStreamWaitEvent(CUcontext ctx, CUstream s, CUevent e);
CUresult kt_cuEventCreate(CUcontext ctx, CUevent *e, unsigned flags);
CUresult kt_cuEventDestroy(CUcontext ctx, CUevent e);
CUresult kt_cuEventRecord(CUcontext ctx, CUevent e, CUstream s);
CUresult kt_cuEventRecordWithFlags(CUcontext ctx, CUevent e, CUstream s, unsigned flags);
CUresult kt_cuEventSynchronize(CUcontext ctx, CUevent e);
CUresult kt_cuEventQuery(CUcontext ctx, CUevent e);
CUresult kt_cuEventElapsedTime(CUcontext ctx, float *ms, CUevent a, CUevent b);
CUresult kt_cuModuleLoadData(CUcontext ctx, CUmodule *m, const void *image);
CUresult kt_cuModuleUnload(CUcontext ctx, CUmodule m);
CUresult kt_cuModuleGetFunction(CUcontext ctx, CUfunction *f, CUmodule m, const char *name);
CUresult kt_cuFuncSetAttribute(CUcontext ctx, CUfunction f, int attr, int v);
CUresult kt_cuFuncGetAttribute(CUcontext ctx, int *v, int attr, CUfunction f);
// kt_launch builds the kernel parameter array from args (8-byte slots, one
// per parameter) and calls cuLaunchKernel, or with early set (and the
// driver has it) cuLaunchKernelEx with programmatic stream serialization:
// the kernel may start before the one ahead of it in the stream ends, and
// must itself wait for it (KT_GRID_DEP in common.cuh).
CUresult kt_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		   unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
		   const uint64_t *args, int nargs, int early);
// kt_has_launch_ex says whether the loaded driver has cuLaunchKernelEx.
int kt_has_launch_ex(void);
CUresult kt_cuStreamBeginCapture(CUcontext ctx, CUstream s, int mode);
CUresult kt_cuStreamEndCapture(CUcontext ctx, CUstream s, CUgraph *g);
CUresult kt_cuGraphInstantiate(CUcontext ctx, CUgraphExec *e, CUgraph g);
CUresult kt_cuGraphLaunch(CUcontext ctx, CUgraphExec e, CUstream s);
CUresult kt_cuGraphExecDestroy(CUcontext ctx, CUgraphExec e);
CUresult kt_cuGraphDestroy(CUcontext ctx, CUgraph g);
const char *kt_cuErrorName(CUresult r);
const char *kt_cuErrorString(CUresult r);

// NVRTC.
nvrtcResult kt_nvrtcVersion(int *major, int *minor);
nvrtcResult kt_nvrtcGetSupportedArchs(int *archs, int cap, int *n);
nvrtcResult kt_nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name);
nvrtcResult kt_nvrtcCompileProgram(nvrtcProgram p, int nopts, const char **opts);
nvrtcResult kt_nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n);
nvrtcResult kt_nvrtcGetProgramLog(nvrtcProgram p, char *buf);
nvrtcResult kt_nvrtcGetCUBINSize(nvrtcProgram p, size_t *n);
nvrtcResult kt_nvrtcGetCUBIN(nvrtcProgram p, char *buf);
nvrtcResult kt_nvrtcGetPTXSize(nvrtcProgram p, size_t *n);
nvrtcResult kt_nvrtcGetPTX(nvrtcProgram p, char *buf);
nvrtcResult kt_nvrtcDestroyProgram(nvrtcProgram *p);
const char *kt_nvrtcErrorString(nvrtcResult r);

// cuBLASLt.
size_t kt_cublasLtGetVersion(void);
cublasStatus_t kt_cublasLtCreate(CUcontext ctx, cublasLtHandle_t *h);
cublasStatus_t kt_cublasLtDestroy(CUcontext ctx, cublasLtHandle_t h);
cublasStatus_t kt_cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, int compute, int scale);
cublasStatus_t kt_cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t kt_cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, int attr, const void *buf, size_t n);
cublasStatus_t kt_cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, int type, uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t kt_cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t kt_cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t kt_cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t kt_cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, int attr, const void *buf, size_t n);
cublasStatus_t kt_cublasLtMatmulAlgoGetHeuristic(CUcontext ctx, cublasLtHandle_t h, cublasLtMatmulDesc_t op,
		cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
		cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t *res, int *returned);
cublasStatus_t kt_cublasLtMatmul(CUcontext ctx, cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
		CUdeviceptr a, cublasLtMatrixLayout_t al, CUdeviceptr b, cublasLtMatrixLayout_t bl, const void *beta,
		CUdeviceptr c, cublasLtMatrixLayout_t cl, CUdeviceptr d, cublasLtMatrixLayout_t dl,
		const cublasLtMatmulAlgo_t *algo, CUdeviceptr ws, size_t wsSize, CUstream s);
const char *kt_cublasLtStatusString(cublasStatus_t s);

#endif
