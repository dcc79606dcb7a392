// The CUDA driver functions iris uses, resolved at run time through the runtime
// (cudaGetDriverEntryPointByVersion) instead of linking libcuda: binaries then start on machines
// without a driver (CI, build hosts), where cudaGetDeviceCount simply reports no device.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace iris::driver {

struct Api {
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
};

// Resolved once; throws iris::CudaError naming the symbol when the driver lacks one.
const Api& api();

// The functions that load a library's kernels ahead of their first launch (CUDA 12.5 drivers and newer).
struct KernelApi {
  PFN_cuKernelGetLibrary_v12050 cuKernelGetLibrary = nullptr;
  PFN_cuLibraryGetKernelCount_v12040 cuLibraryGetKernelCount = nullptr;
  PFN_cuLibraryEnumerateKernels_v12040 cuLibraryEnumerateKernels = nullptr;
  PFN_cuKernelGetFunction_v12000 cuKernelGetFunction = nullptr;
  PFN_cuFuncIsLoaded_v12040 cuFuncIsLoaded = nullptr;
  PFN_cuFuncLoad_v12040 cuFuncLoad = nullptr;
  PFN_cuFuncGetAttribute_v2020 cuFuncGetAttribute = nullptr;
};

// Resolved once; throws iris::CudaError naming the symbol when the driver lacks one.
const KernelApi& kernel_api();

// Host tests of the code above the driver (the symmetric heap's setup and teardown, without a GPU): while
// `fake` is set, api() returns it instead of the driver's functions; nullptr returns to the driver. Set it
// before, and reset it after, every thread that calls api().
void set_api_for_testing(const Api* fake);

// Name and text of a driver error code, or placeholders when the driver is unavailable.
const char* error_name(CUresult res);
const char* error_string(CUresult res);

}  // namespace iris::driver
