//go:build cgo

package cuda

/*
#include "ktcuda.h"
*/
import "C"

import "fmt"

// Error is a failed CUDA driver, NVRTC or cuBLASLt call, decoded to text.
type Error struct {
	Call string // the API call and its salient arguments
	Lib  string // "driver", "nvrtc" or "cublasLt"
	Code int    // the library's status code
	Name string // symbolic name, e.g. CUDA_ERROR_OUT_OF_MEMORY
	Msg  string // the library's description
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s failed: ", e.Call)
	if e.Name != "" {
		s += e.Name + " "
	}
	s += fmt.Sprintf("(%s error %d)", e.Lib, e.Code)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Driver result codes kt looks at.
const (
	cuSuccess     = 0
	cuErrNotReady = 600
)

// cuErr turns a CUresult into an *Error naming call, or nil on success.
func cuErr(r C.CUresult, call string, args ...any) error {
	if r == cuSuccess {
		return nil
	}
	if len(args) > 0 {
		call = fmt.Sprintf(call, args...)
	}
	e := &Error{Call: call, Lib: "driver", Code: int(r)}
	if s := C.kt_cuErrorName(r); s != nil {
		e.Name = C.GoString(s)
	}
	if s := C.kt_cuErrorString(r); s != nil {
		e.Msg = C.GoString(s)
	}
	return e
}

// nvrtcErr turns an nvrtcResult into an *Error, or nil on success.
func nvrtcErr(r C.nvrtcResult, call string) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Lib: "nvrtc", Code: int(r)}
	if s := C.kt_nvrtcErrorString(r); s != nil {
		e.Name = C.GoString(s)
	}
	return e
}

// cublasStatusNames maps cublasStatus_t values to their names (cublas_api.h).
var cublasStatusNames = map[int]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// ltErr turns a cublasStatus_t into an *Error, or nil on success.
func ltErr(r C.cublasStatus_t, call string, args ...any) error {
	if r == 0 {
		return nil
	}
	if len(args) > 0 {
		call = fmt.Sprintf(call, args...)
	}
	e := &Error{Call: call, Lib: "cublasLt", Code: int(r), Name: cublasStatusNames[int(r)]}
	if s := C.kt_cublasLtStatusString(r); s != nil {
		e.Msg = C.GoString(s)
	}
	return e
}
