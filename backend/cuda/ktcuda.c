// ktcuda.c: dlopen trampolines for the CUDA driver, NVRTC, cuBLASLt and NCCL.
// Function pointers are resolved once per process (the libraries themselves
// are process-wide); the Go side serialises loading with sync.Once.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "ktcuda.h"

#define KT_ERR_NOT_LOADED 0x7ffffff0

static void *h_driver, *h_nvrtc, *h_cublaslt, *h_nccl;
static char load_err[512];

// ---- driver ---------------------------------------------------------------
#define DRIVER_FUNCS(X) \
	X(cuInit, CUresult, (unsigned)) \
	X(cuDriverGetVersion, CUresult, (int *)) \
	X(cuDeviceGetCount, CUresult, (int *)) \
	X(cuDeviceGet, CUresult, (CUdevice *, int)) \
	X(cuDeviceGetName, CUresult, (char *, int, CUdevice)) \
	X(cuDeviceGetAttribute, CUresult, (int *, int, CUdevice)) \
	X(cuDeviceTotalMem_v2, CUresult, (size_t *, CUdevice)) \
	X(cuDeviceGetPCIBusId, CUresult, (char *, int, CUdevice)) \
	X(cuDeviceCanAccessPeer, CUresult, (int *, CUdevice, CUdevice)) \
	X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice)) \
	X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice)) \
	X(cuCtxSetCurrent, CUresult, (CUcontext)) \
	X(cuCtxSynchronize, CUresult, (void)) \
	X(cuMemGetInfo_v2, CUresult, (size_t *, size_t *)) \
	X(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t)) \
	X(cuMemFree_v2, CUresult, (CUdeviceptr)) \
	X(cuMemHostAlloc, CUresult, (void **, size_t, unsigned)) \
	X(cuMemFreeHost, CUresult, (void *)) \
	X(cuMemHostGetDevicePointer_v2, CUresult, (CUdeviceptr *, void *, unsigned)) \
	X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr, const void *, size_t)) \
	X(cuMemcpyDtoH_v2, CUresult, (void *, CUdeviceptr, size_t)) \
	X(cuMemcpyHtoDAsync_v2, CUresult, (CUdeviceptr, const void *, size_t, CUstream)) \
	X(cuMemcpyDtoHAsync_v2, CUresult, (void *, CUdeviceptr, size_t, CUstream)) \
	X(cuMemcpyDtoDAsync_v2, CUresult, (CUdeviceptr, CUdeviceptr, size_t, CUstream)) \
	X(cuMemsetD8Async, CUresult, (CUdeviceptr, unsigned char, size_t, CUstream)) \
	X(cuStreamCreate, CUresult, (CUstream *, unsigned)) \
	X(cuStreamDestroy_v2, CUresult, (CUstream)) \
	X(cuStreamSynchronize, CUresult, (CUstream)) \
	X(cuStreamWaitEvent, CUresult, (CUstream, CUevent, unsigned)) \
	X(cuEventCreate, CUresult, (CUevent *, unsigned)) \
	X(cuEventDestroy_v2, CUresult, (CUevent)) \
	X(cuEventRecord, CUresult, (CUevent, CUstream)) \
	X(cuEventSynchronize, CUresult, (CUevent)) \
	X(cuEventQuery, CUresult, (CUevent)) \
	X(cuModuleLoadData, CUresult, (CUmodule *, const void *)) \
	X(cuModuleUnload, CUresult, (CUmodule)) \
	X(cuModuleGetFunction, CUresult, (CUfunction *, CUmodule, const char *)) \
	X(cuFuncSetAttribute, CUresult, (CUfunction, int, int)) \
	X(cuFuncGetAttribute, CUresult, (int *, int, CUfunction)) \
	X(cuLaunchKernel, CUresult, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **)) \
	X(cuStreamBeginCapture_v2, CUresult, (CUstream, int)) \
	X(cuStreamEndCapture, CUresult, (CUstream, CUgraph *)) \
	X(cuGraphInstantiateWithFlags, CUresult, (CUgraphExec *, CUgraph, unsigned long long)) \
	X(cuGraphLaunch, CUresult, (CUgraphExec, CUstream)) \
	X(cuGraphExecDestroy, CUresult, (CUgraphExec)) \
	X(cuGraphDestroy, CUresult, (CUgraph)) \
	X(cuGetErrorName, CUresult, (CUresult, const char **)) \
	X(cuGetErrorString, CUresult, (CUresult, const char **))

#define DECL(name, ret, args) static ret(*p_##name) args;
DRIVER_FUNCS(DECL)
static CUresult (*p_cuEventElapsedTime) (float *, CUevent, CUevent);
static CUresult (*p_cuEventRecordWithFlags) (CUevent, CUstream, unsigned); /* optional (CUDA >= 11.1) */

/* cuLaunchKernelEx (CUDA >= 11.8, optional) and the parts of cuda.h's
 * launch configuration it reads: a launch attribute is an 8-byte id slot and
 * a 64-byte value union. */
typedef struct {
	int id;
	char pad[4];
	union {
		char bytes[64];
		int programmaticStreamSerializationAllowed;
	} value;
} kt_launch_attr;
typedef struct {
	unsigned gridDimX, gridDimY, gridDimZ;
	unsigned blockDimX, blockDimY, blockDimZ;
	unsigned sharedMemBytes;
	CUstream hStream;
	kt_launch_attr *attrs;
	unsigned numAttrs;
} kt_launch_config;
#define KT_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
_Static_assert(sizeof(kt_launch_attr) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(sizeof(kt_launch_config) == 56, "CUlaunchConfig is 56 bytes");
static CUresult (*p_cuLaunchKernelEx) (const kt_launch_config *, CUfunction, void **, void **);

static const char *resolve(void *h, const char *lib, const char *name, void **dst) {
	*dst = dlsym(h, name);
	if (!*dst) {
		snprintf(load_err, sizeof load_err, "%s: symbol %s not found", lib, name);
		return load_err;
	}
	return NULL;
}

static const char *open_lib(void **h, const char *path) {
	*h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!*h) {
		const char *e = dlerror();
		snprintf(load_err, sizeof load_err, "%s", e ? e : "dlopen failed");
		return load_err;
	}
	return NULL;
}

#define RESOLVE(name, ret, args) \
	if ((err = resolve(h, path, #name, (void **)&p_##name)) != NULL) goto fail;

const char *kt_load_driver(const char *path) {
	if (h_driver) return NULL;
	void *h;
	const char *err = open_lib(&h, path);
	if (err) return err;
	DRIVER_FUNCS(RESOLVE)
	p_cuEventElapsedTime = dlsym(h, "cuEventElapsedTime_v2");
	if (!p_cuEventElapsedTime &&
	    (err = resolve(h, path, "cuEventElapsedTime", (void **)&p_cuEventElapsedTime)) != NULL)
		goto fail;
	p_cuEventRecordWithFlags = dlsym(h, "cuEventRecordWithFlags");
	p_cuLaunchKernelEx = dlsym(h, "cuLaunchKernelEx");
	h_driver = h;
	return NULL;
fail:
	dlclose(h);
	return err;
}

#define SETCTX \
	if (!h_driver) return KT_ERR_NOT_LOADED; \
	if (ctx) { CUresult _r = p_cuCtxSetCurrent(ctx); if (_r) return _r; }
#define NOCTX if (!h_driver) return KT_ERR_NOT_LOADED;

CUresult kt_cuInit(void) { NOCTX return p_cuInit(0); }
CUresult kt_cuDriverGetVersion(int *v) { NOCTX return p_cuDriverGetVersion(v); }
CUresult kt_cuDeviceGetCount(int *n) { NOCTX return p_cuDeviceGetCount(n); }
CUresult kt_cuDeviceGet(CUdevice *d, int o) { NOCTX return p_cuDeviceGet(d, o); }
CUresult kt_cuDeviceGetName(char *b, int n, CUdevice d) { NOCTX return p_cuDeviceGetName(b, n, d); }
CUresult kt_cuDeviceGetAttribute(int *v, int a, CUdevice d) { NOCTX return p_cuDeviceGetAttribute(v, a, d); }
CUresult kt_cuDeviceTotalMem(size_t *b, CUdevice d) { NOCTX return p_cuDeviceTotalMem_v2(b, d); }
CUresult kt_cuDeviceGetPCIBusId(char *b, int n, CUdevice d) { NOCTX return p_cuDeviceGetPCIBusId(b, n, d); }
CUresult kt_cuDeviceCanAccessPeer(int *v, CUdevice a, CUdevice b) { NOCTX return p_cuDeviceCanAccessPeer(v, a, b); }
CUresult kt_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { NOCTX return p_cuDevicePrimaryCtxRetain(c, d); }
CUresult kt_cuDevicePrimaryCtxRelease(CUdevice d) { NOCTX return p_cuDevicePrimaryCtxRelease_v2(d); }
CUresult kt_cuCtxSynchronize(CUcontext ctx) { SETCTX return p_cuCtxSynchronize(); }
CUresult kt_cuMemGetInfo(CUcontext ctx, size_t *f, size_t *t) { SETCTX return p_cuMemGetInfo_v2(f, t); }
CUresult kt_cuMemAlloc(CUcontext ctx, CUdeviceptr *p, size_t n) { SETCTX return p_cuMemAlloc_v2(p, n); }
CUresult kt_cuMemFree(CUcontext ctx, CUdeviceptr p) { SETCTX return p_cuMemFree_v2(p); }
CUresult kt_cuMemHostAlloc(CUcontext ctx, void **p, size_t n, unsigned fl) { SETCTX return p_cuMemHostAlloc(p, n, fl); }
CUresult kt_cuMemFreeHost(CUcontext ctx, void *p) { SETCTX return p_cuMemFreeHost(p); }
CUresult kt_cuMemHostGetDevicePointer(CUcontext ctx, CUdeviceptr *d, void *p) { SETCTX return p_cuMemHostGetDevicePointer_v2(d, p, 0); }
CUresult kt_cuMemcpyHtoD(CUcontext ctx, CUdeviceptr d, const void *s, size_t n) { SETCTX return p_cuMemcpyHtoD_v2(d, s, n); }
CUresult kt_cuMemcpyDtoH(CUcontext ctx, void *d, CUdeviceptr s, size_t n) { SETCTX return p_cuMemcpyDtoH_v2(d, s, n); }
CUresult kt_cuMemcpyHtoDAsync(CUcontext ctx, CUdeviceptr d, const void *s, size_t n, CUstream st) { SETCTX return p_cuMemcpyHtoDAsync_v2(d, s, n, st); }
CUresult kt_cuMemcpyDtoHAsync(CUcontext ctx, void *d, CUdeviceptr s, size_t n, CUstream st) { SETCTX return p_cuMemcpyDtoHAsync_v2(d, s, n, st); }
CUresult kt_cuMemcpyDtoDAsync(CUcontext ctx, CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { SETCTX return p_cuMemcpyDtoDAsync_v2(d, s, n, st); }
CUresult kt_cuMemsetD8Async(CUcontext ctx, CUdeviceptr d, unsigned char v, size_t n, CUstream st) { SETCTX return p_cuMemsetD8Async(d, v, n, st); }
CUresult kt_cuStreamCreate(CUcontext ctx, CUstream *s, unsigned fl) { SETCTX return p_cuStreamCreate(s, fl); }
CUresult kt_cuStreamDestroy(CUcontext ctx, CUstream s) { SETCTX return p_cuStreamDestroy_v2(s); }
CUresult kt_cuStreamSynchronize(CUcontext ctx, CUstream s) { SETCTX return p_cuStreamSynchronize(s); }
CUresult kt_cuStreamWaitEvent(CUcontext ctx, CUstream s, CUevent e) { SETCTX return p_cuStreamWaitEvent(s, e, 0); }
CUresult kt_cuEventCreate(CUcontext ctx, CUevent *e, unsigned fl) { SETCTX return p_cuEventCreate(e, fl); }
CUresult kt_cuEventDestroy(CUcontext ctx, CUevent e) { SETCTX return p_cuEventDestroy_v2(e); }
CUresult kt_cuEventRecord(CUcontext ctx, CUevent e, CUstream s) { SETCTX return p_cuEventRecord(e, s); }
CUresult kt_cuEventRecordWithFlags(CUcontext ctx, CUevent e, CUstream s, unsigned flags) {
	SETCTX
	if (!p_cuEventRecordWithFlags) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
	return p_cuEventRecordWithFlags(e, s, flags);
}
CUresult kt_cuEventSynchronize(CUcontext ctx, CUevent e) { SETCTX return p_cuEventSynchronize(e); }
CUresult kt_cuEventQuery(CUcontext ctx, CUevent e) { SETCTX return p_cuEventQuery(e); }
CUresult kt_cuEventElapsedTime(CUcontext ctx, float *ms, CUevent a, CUevent b) { SETCTX return p_cuEventElapsedTime(ms, a, b); }
CUresult kt_cuModuleLoadData(CUcontext ctx, CUmodule *m, const void *img) { SETCTX return p_cuModuleLoadData(m, img); }
CUresult kt_cuModuleUnload(CUcontext ctx, CUmodule m) { SETCTX return p_cuModuleUnload(m); }
CUresult kt_cuModuleGetFunction(CUcontext ctx, CUfunction *f, CUmodule m, const char *n) { SETCTX return p_cuModuleGetFunction(f, m, n); }
CUresult kt_cuFuncSetAttribute(CUcontext ctx, CUfunction f, int a, int v) { SETCTX return p_cuFuncSetAttribute(f, a, v); }
CUresult kt_cuFuncGetAttribute(CUcontext ctx, int *v, int a, CUfunction f) { SETCTX return p_cuFuncGetAttribute(v, a, f); }

int kt_has_launch_ex(void) { return p_cuLaunchKernelEx != NULL; }

CUresult kt_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		   unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
		   const uint64_t *args, int nargs, int early) {
	SETCTX
	void *params[64];
	if (nargs > 64) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) params[i] = (void *)&args[i];
	if (early && p_cuLaunchKernelEx) {
		kt_launch_attr attr;
		memset(&attr, 0, sizeof attr);
		attr.id = KT_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
		attr.value.programmaticStreamSerializationAllowed = 1;
		kt_launch_config cfg = {gx, gy, gz, bx, by, bz, smem, s, &attr, 1};
		return p_cuLaunchKernelEx(&cfg, f, params, NULL);
	}
	return p_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL);
}

CUresult kt_cuStreamBeginCapture(CUcontext ctx, CUstream s, int mode) { SETCTX return p_cuStreamBeginCapture_v2(s, mode); }
CUresult kt_cuStreamEndCapture(CUcontext ctx, CUstream s, CUgraph *g) { SETCTX return p_cuStreamEndCapture(s, g); }
CUresult kt_cuGraphInstantiate(CUcontext ctx, CUgraphExec *e, CUgraph g) { SETCTX return p_cuGraphInstantiateWithFlags(e, g, 0); }
CUresult kt_cuGraphLaunch(CUcontext ctx, CUgraphExec e, CUstream s) { SETCTX return p_cuGraphLaunch(e, s); }
CUresult kt_cuGraphExecDestroy(CUcontext ctx, CUgraphExec e) { SETCTX return p_cuGraphExecDestroy(e); }
CUresult kt_cuGraphDestroy(CUcontext ctx, CUgraph g) { SETCTX return p_cuGraphDestroy(g); }

const char *kt_cuErrorName(CUresult r) {
	const char *s = NULL;
	if (r == KT_ERR_NOT_LOADED) return "KT_ERROR_DRIVER_NOT_LOADED";
	if (!h_driver || p_cuGetErrorName(r, &s) != 0 || !s) return NULL;
	return s;
}
const char *kt_cuErrorString(CUresult r) {
	const char *s = NULL;
	if (r == KT_ERR_NOT_LOADED) return "the CUDA driver library is not loaded";
	if (!h_driver || p_cuGetErrorString(r, &s) != 0 || !s) return NULL;
	return s;
}

// ---- NVRTC ----------------------------------------------------------------
#define NVRTC_FUNCS(X) \
	X(nvrtcVersion, nvrtcResult, (int *, int *)) \
	X(nvrtcGetNumSupportedArchs, nvrtcResult, (int *)) \
	X(nvrtcGetSupportedArchs, nvrtcResult, (int *)) \
	X(nvrtcCreateProgram, nvrtcResult, (nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *)) \
	X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char *const *)) \
	X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t *)) \
	X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char *)) \
	X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram, size_t *)) \
	X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram, char *)) \
	X(nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram, size_t *)) \
	X(nvrtcGetPTX, nvrtcResult, (nvrtcProgram, char *)) \
	X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram *)) \
	X(nvrtcGetErrorString, const char *, (nvrtcResult))
NVRTC_FUNCS(DECL)

const char *kt_load_nvrtc(const char *path) {
	if (h_nvrtc) return NULL;
	void *h;
	const char *err = open_lib(&h, path);
	if (err) return err;
	NVRTC_FUNCS(RESOLVE)
	h_nvrtc = h;
	return NULL;
fail:
	dlclose(h);
	return err;
}

#define NVRTC_CHECK if (!h_nvrtc) return KT_ERR_NOT_LOADED;
nvrtcResult kt_nvrtcVersion(int *a, int *b) { NVRTC_CHECK return p_nvrtcVersion(a, b); }
nvrtcResult kt_nvrtcGetSupportedArchs(int *archs, int cap, int *n) {
	NVRTC_CHECK
	int cnt = 0;
	nvrtcResult r = p_nvrtcGetNumSupportedArchs(&cnt);
	if (r) return r;
	*n = cnt;
	if (cnt > cap) return 0;
	return p_nvrtcGetSupportedArchs(archs);
}
nvrtcResult kt_nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name) {
	NVRTC_CHECK return p_nvrtcCreateProgram(p, src, name, 0, NULL, NULL);
}
nvrtcResult kt_nvrtcCompileProgram(nvrtcProgram p, int n, const char **o) { NVRTC_CHECK return p_nvrtcCompileProgram(p, n, o); }
nvrtcResult kt_nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n) { NVRTC_CHECK return p_nvrtcGetProgramLogSize(p, n); }
nvrtcResult kt_nvrtcGetProgramLog(nvrtcProgram p, char *b) { NVRTC_CHECK return p_nvrtcGetProgramLog(p, b); }
nvrtcResult kt_nvrtcGetCUBINSize(nvrtcProgram p, size_t *n) { NVRTC_CHECK return p_nvrtcGetCUBINSize(p, n); }
nvrtcResult kt_nvrtcGetCUBIN(nvrtcProgram p, char *b) { NVRTC_CHECK return p_nvrtcGetCUBIN(p, b); }
nvrtcResult kt_nvrtcGetPTXSize(nvrtcProgram p, size_t *n) { NVRTC_CHECK return p_nvrtcGetPTXSize(p, n); }
nvrtcResult kt_nvrtcGetPTX(nvrtcProgram p, char *b) { NVRTC_CHECK return p_nvrtcGetPTX(p, b); }
nvrtcResult kt_nvrtcDestroyProgram(nvrtcProgram *p) { NVRTC_CHECK return p_nvrtcDestroyProgram(p); }
const char *kt_nvrtcErrorString(nvrtcResult r) {
	if (r == KT_ERR_NOT_LOADED) return "NVRTC library not loaded";
	if (!h_nvrtc) return NULL;
	return p_nvrtcGetErrorString(r);
}

// ---- cuBLASLt -------------------------------------------------------------
#define LT_FUNCS(X) \
	X(cublasLtGetVersion, size_t, (void)) \
	X(cublasLtCreate, cublasStatus_t, (cublasLtHandle_t *)) \
	X(cublasLtDestroy, cublasStatus_t, (cublasLtHandle_t)) \
	X(cublasLtMatmulDescCreate, cublasStatus_t, (cublasLtMatmulDesc_t *, int, int)) \
	X(cublasLtMatmulDescDestroy, cublasStatus_t, (cublasLtMatmulDesc_t)) \
	X(cublasLtMatmulDescSetAttribute, cublasStatus_t, (cublasLtMatmulDesc_t, int, const void *, size_t)) \
	X(cublasLtMatrixLayoutCreate, cublasStatus_t, (cublasLtMatrixLayout_t *, int, uint64_t, uint64_t, int64_t)) \
	X(cublasLtMatrixLayoutDestroy, cublasStatus_t, (cublasLtMatrixLayout_t)) \
	X(cublasLtMatmulPreferenceCreate, cublasStatus_t, (cublasLtMatmulPreference_t *)) \
	X(cublasLtMatmulPreferenceDestroy, cublasStatus_t, (cublasLtMatmulPreference_t)) \
	X(cublasLtMatmulPreferenceSetAttribute, cublasStatus_t, (cublasLtMatmulPreference_t, int, const void *, size_t)) \
	X(cublasLtMatmulAlgoGetHeuristic, cublasStatus_t, (cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *)) \
	X(cublasLtMatmul, cublasStatus_t, (cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t, CUstream))
LT_FUNCS(DECL)
static const char *(*p_cublasLtGetStatusString)(cublasStatus_t);

const char *kt_load_cublaslt(const char *path) {
	if (h_cublaslt) return NULL;
	void *h;
	const char *err = open_lib(&h, path);
	if (err) return err;
	LT_FUNCS(RESOLVE)
	p_cublasLtGetStatusString = dlsym(h, "cublasLtGetStatusString");
	h_cublaslt = h;
	return NULL;
fail:
	dlclose(h);
	return err;
}

#define LT_CHECK if (!h_cublaslt) return KT_ERR_NOT_LOADED;
#define LT_SETCTX LT_CHECK if (ctx && h_driver) { CUresult _r = p_cuCtxSetCurrent(ctx); if (_r) return 14; /* CUBLAS_STATUS_INTERNAL_ERROR */ }
size_t kt_cublasLtGetVersion(void) { if (!h_cublaslt) return 0; return p_cublasLtGetVersion(); }
cublasStatus_t kt_cublasLtCreate(CUcontext ctx, cublasLtHandle_t *h) { LT_SETCTX return p_cublasLtCreate(h); }
cublasStatus_t kt_cublasLtDestroy(CUcontext ctx, cublasLtHandle_t h) { LT_SETCTX return p_cublasLtDestroy(h); }
cublasStatus_t kt_cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, int c, int s) { LT_CHECK return p_cublasLtMatmulDescCreate(d, c, s); }
cublasStatus_t kt_cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { LT_CHECK return p_cublasLtMatmulDescDestroy(d); }
cublasStatus_t kt_cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, int a, const void *b, size_t n) { LT_CHECK return p_cublasLtMatmulDescSetAttribute(d, a, b, n); }
cublasStatus_t kt_cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, int t, uint64_t r, uint64_t c, int64_t ld) { LT_CHECK return p_cublasLtMatrixLayoutCreate(l, t, r, c, ld); }
cublasStatus_t kt_cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { LT_CHECK return p_cublasLtMatrixLayoutDestroy(l); }
cublasStatus_t kt_cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { LT_CHECK return p_cublasLtMatmulPreferenceCreate(p); }
cublasStatus_t kt_cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { LT_CHECK return p_cublasLtMatmulPreferenceDestroy(p); }
cublasStatus_t kt_cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, int a, const void *b, size_t n) { LT_CHECK return p_cublasLtMatmulPreferenceSetAttribute(p, a, b, n); }
cublasStatus_t kt_cublasLtMatmulAlgoGetHeuristic(CUcontext ctx, cublasLtHandle_t h, cublasLtMatmulDesc_t op,
		cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
		cublasLtMatmulPreference_t pref, int req, cublasLtMatmulHeuristicResult_t *res, int *ret) {
	LT_SETCTX return p_cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, d, pref, req, res, ret);
}
cublasStatus_t kt_cublasLtMatmul(CUcontext ctx, cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
		CUdeviceptr a, cublasLtMatrixLayout_t al, CUdeviceptr b, cublasLtMatrixLayout_t bl, const void *beta,
		CUdeviceptr c, cublasLtMatrixLayout_t cl, CUdeviceptr d, cublasLtMatrixLayout_t dl,
		const cublasLtMatmulAlgo_t *algo, CUdeviceptr ws, size_t wsSize, CUstream s) {
	LT_SETCTX
	return p_cublasLtMatmul(h, op, alpha, (const void *)a, al, (const void *)b, bl, beta, (const void *)c, cl,
				(void *)d, dl, algo, (void *)ws, wsSize, s);
}
const char *kt_cublasLtStatusString(cublasStatus_t s) {
	if (s == KT_ERR_NOT_LOADED) return "cuBLASLt library not loaded";
	if (!p_cublasLtGetStatusString) return NULL;
	return p_cublasLtGetStatusString(s);
}

// ---- NCCL -----------------------------------------------------------------
// The collectives tensor parallelism uses (backend/cuda/nccl.go), resolved
// at load with ncclGetVersion: every one is in NCCL 2.4 and later.
#define NCCL_FUNCS(X) \
	X(ncclGetVersion, int, (int *)) \
	X(ncclGetErrorString, const char *, (int)) \
	X(ncclCommInitAll, int, (ncclComm_t *, int, const int *)) \
	X(ncclCommDestroy, int, (ncclComm_t)) \
	X(ncclCommAbort, int, (ncclComm_t)) \
	X(ncclAllReduce, int, (const void *, void *, size_t, int, int, ncclComm_t, CUstream)) \
	X(ncclBroadcast, int, (const void *, void *, size_t, int, int, ncclComm_t, CUstream)) \
	X(ncclAllGather, int, (const void *, void *, size_t, int, ncclComm_t, CUstream)) \
	X(ncclGroupStart, int, (void)) \
	X(ncclGroupEnd, int, (void))
#define NCCL_DECL(name, ret, args) static ret(*p_##name) args;
NCCL_FUNCS(NCCL_DECL)
const char *kt_load_nccl(const char *path) {
	if (h_nccl) return NULL;
	void *h;
	const char *err = open_lib(&h, path);
	if (err) return err;
#define NCCL_RESOLVE(name, ret, args) \
	if ((err = resolve(h, path, #name, (void **)&p_##name)) != NULL) { dlclose(h); return err; }
	NCCL_FUNCS(NCCL_RESOLVE)
	h_nccl = h;
	return NULL;
}
#define NCCLCHECK if (!h_nccl) return KT_ERR_NOT_LOADED;
#define NCCLCTX NCCLCHECK if (ctx && h_driver) { CUresult _r = p_cuCtxSetCurrent(ctx); if (_r) return KT_NCCL_CTX_ERROR; }
int kt_ncclGetVersion(int *v) { NCCLCHECK return p_ncclGetVersion(v); }
const char *kt_ncclGetErrorString(int r) {
	if (!h_nccl) return "NCCL library not loaded";
	return p_ncclGetErrorString(r);
}
int kt_ncclCommInitAll(ncclComm_t *comms, int n, const int *devs) { NCCLCHECK return p_ncclCommInitAll(comms, n, devs); }
int kt_ncclCommDestroy(ncclComm_t c) { NCCLCHECK return p_ncclCommDestroy(c); }
int kt_ncclCommAbort(ncclComm_t c) { NCCLCHECK return p_ncclCommAbort(c); }
int kt_ncclAllReduce(CUcontext ctx, CUdeviceptr send, CUdeviceptr recv, size_t count, int dt, int op, ncclComm_t c, CUstream s) {
	NCCLCTX return p_ncclAllReduce((const void *)send, (void *)recv, count, dt, op, c, s);
}
int kt_ncclBroadcast(CUcontext ctx, CUdeviceptr send, CUdeviceptr recv, size_t count, int dt, int root, ncclComm_t c, CUstream s) {
	NCCLCTX return p_ncclBroadcast((const void *)send, (void *)recv, count, dt, root, c, s);
}
int kt_ncclAllGather(CUcontext ctx, CUdeviceptr send, CUdeviceptr recv, size_t count, int dt, ncclComm_t c, CUstream s) {
	NCCLCTX return p_ncclAllGather((const void *)send, (void *)recv, count, dt, c, s);
}
