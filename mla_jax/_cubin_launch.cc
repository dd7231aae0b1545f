// An XLA FFI handler that launches a Triton-built kernel from its cubin, which the
// call carries (base64), so that a new process runs no ptxas: jaxlib's
// triton_kernel_call takes PTX and compiles it in every process. mla_jax._launch
// builds this file with the machine's C++ compiler and registers it.
//
// The launch follows jaxlib's convention for Triton kernels: the array operands in
// order, then the results, then two null pointers (global and profiling scratch; a
// kernel that needs global scratch gets it as its last result, whose pointer then
// sits where the kernel reads it). CUDA's driver API is opened at run time
// (libcuda.so.1), so the library builds on a machine without CUDA.
#include <dlfcn.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "cuda.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Driver {
  decltype(&::cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&::cuModuleLoadData) module_load_data = nullptr;
  decltype(&::cuModuleGetFunction) module_get_function = nullptr;
  decltype(&::cuFuncSetAttribute) func_set_attribute = nullptr;
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  std::string error;
};

const Driver& GetDriver() {
  static Driver* driver = [] {
    auto* d = new Driver;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      d->error = std::string("cannot open libcuda.so.1: ") + dlerror();
      return d;
    }
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (p == nullptr && d->error.empty()) d->error = std::string("libcuda has no ") + name;
      return p;
    };
    d->ctx_get_current = reinterpret_cast<decltype(d->ctx_get_current)>(sym("cuCtxGetCurrent"));
    d->module_load_data = reinterpret_cast<decltype(d->module_load_data)>(sym("cuModuleLoadData"));
    d->module_get_function =
        reinterpret_cast<decltype(d->module_get_function)>(sym("cuModuleGetFunction"));
    d->func_set_attribute =
        reinterpret_cast<decltype(d->func_set_attribute)>(sym("cuFuncSetAttribute"));
    d->launch_kernel_ex = reinterpret_cast<decltype(d->launch_kernel_ex)>(sym("cuLaunchKernelEx"));
    d->get_error_string = reinterpret_cast<decltype(d->get_error_string)>(sym("cuGetErrorString"));
    return d;
  }();
  return *driver;
}

ffi::Error CudaError(const Driver& d, CUresult r, const char* what) {
  const char* msg = nullptr;
  if (d.get_error_string != nullptr) d.get_error_string(r, &msg);
  return ffi::Error::Internal(std::string(what) + ": " + (msg ? msg : "unknown CUDA error"));
}

// The bytes base64 encodes (RFC 4648, padded); empty where it is not base64.
std::string DecodeBase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=') break;
    int v = value(c);
    if (v < 0) return std::string();
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (++count == 4) {
      out.push_back(static_cast<char>(bits >> 16));
      out.push_back(static_cast<char>(bits >> 8));
      out.push_back(static_cast<char>(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count == 3) {
    out.push_back(static_cast<char>(bits >> 10));
    out.push_back(static_cast<char>(bits >> 2));
  } else if (count == 2) {
    out.push_back(static_cast<char>(bits >> 4));
  }
  return out;
}

// One loaded function per (cubin hash, kernel, context): loading is what a new
// process pays once, then every launch looks it up by the cubin's hash (the call
// carries it, so no launch hashes the cubin).
ffi::ErrorOr<CUfunction> GetFunction(const Driver& d, std::string_view cubin,
                                     std::string_view cubin_hash, std::string_view kernel,
                                     int64_t shared) {
  static std::mutex mutex;
  static auto& functions = *new std::map<std::tuple<std::string, std::string, CUcontext>, CUfunction>;
  CUcontext ctx = nullptr;
  if (CUresult r = d.ctx_get_current(&ctx); r != CUDA_SUCCESS) return ffi::Unexpected(CudaError(d, r, "cuCtxGetCurrent"));
  auto key = std::make_tuple(std::string(cubin_hash), std::string(kernel), ctx);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = functions.find(key); it != functions.end()) return it->second;
  std::string image = DecodeBase64(cubin);
  if (image.empty()) return ffi::Unexpected(ffi::Error::InvalidArgument("the cubin attribute is not base64"));
  CUmodule module = nullptr;
  if (CUresult r = d.module_load_data(&module, image.data()); r != CUDA_SUCCESS)
    return ffi::Unexpected(CudaError(d, r, "cuModuleLoadData"));
  CUfunction function = nullptr;
  if (CUresult r = d.module_get_function(&function, module, std::get<1>(key).c_str()); r != CUDA_SUCCESS)
    return ffi::Unexpected(CudaError(d, r, "cuModuleGetFunction"));
  if (shared > 49152) {  // dynamic shared memory past 48 KB must be opted in to
    if (CUresult r = d.func_set_attribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          static_cast<int>(shared));
        r != CUDA_SUCCESS)
      return ffi::Unexpected(CudaError(d, r, "cuFuncSetAttribute"));
  }
  functions.emplace(std::move(key), function);
  return function;
}

ffi::Error Launch(CUstream stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                  std::string_view cubin, std::string_view cubin_hash, std::string_view kernel, int64_t grid_x, int64_t grid_y,
                  int64_t grid_z, int64_t num_warps, int64_t shared, int64_t cluster,
                  int64_t scratch_align) {
  const Driver& d = GetDriver();
  if (!d.error.empty()) return ffi::Error::Internal(d.error);
  auto function = GetFunction(d, cubin, cubin_hash, kernel, shared);
  if (function.has_error()) return function.error();
  std::vector<void*> pointers;
  for (size_t i = 0; i < args.size(); ++i) {
    auto buffer = args.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    pointers.push_back(buffer->untyped_data());
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto buffer = rets.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    pointers.push_back((*buffer)->untyped_data());
  }
  // Triton's build assumes every array 16-byte aligned and a global scratch (the last
  // result, where scratch_align > 0) aligned as it asks; XLA's buffers are, checked
  // here as jaxlib's launch checks them.
  for (size_t i = 0; i < pointers.size(); ++i) {
    bool is_scratch = scratch_align > 0 && i + 1 == pointers.size();
    uintptr_t align = is_scratch ? static_cast<uintptr_t>(scratch_align) : 16;
    if (reinterpret_cast<uintptr_t>(pointers[i]) % align != 0)
      return ffi::Error::InvalidArgument("buffer " + std::to_string(i) + " of " + std::string(kernel) +
                                         " is not " + std::to_string(align) + "-byte aligned");
  }
  pointers.push_back(nullptr);  // global scratch (or profiling, see above)
  pointers.push_back(nullptr);  // profiling scratch
  std::vector<void*> params;
  for (void*& p : pointers) params.push_back(&p);
  CUlaunchAttribute attribute{};
  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(grid_x);
  config.gridDimY = static_cast<unsigned>(grid_y);
  config.gridDimZ = static_cast<unsigned>(grid_z);
  config.blockDimX = static_cast<unsigned>(32 * num_warps);
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(shared);
  config.hStream = stream;
  if (cluster > 1) {  // consecutive programs along x as one cluster
    attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim.x = static_cast<unsigned>(cluster);
    attribute.value.clusterDim.y = 1;
    attribute.value.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  if (CUresult r = d.launch_kernel_ex(&config, *function, params.data(), nullptr); r != CUDA_SUCCESS)
    return CudaError(d, r, "cuLaunchKernelEx");
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(kCubinLaunch, Launch,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::PlatformStream<CUstream>>()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<std::string_view>("cubin")
                           .Attr<std::string_view>("cubin_hash")
                           .Attr<std::string_view>("kernel")
                           .Attr<int64_t>("grid_x")
                           .Attr<int64_t>("grid_y")
                           .Attr<int64_t>("grid_z")
                           .Attr<int64_t>("num_warps")
                           .Attr<int64_t>("shared")
                           .Attr<int64_t>("cluster")
                           .Attr<int64_t>("scratch_align"),
                       {ffi::Traits::kCmdBufferCompatible});

extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* MlaJaxCubinLaunch(
    XLA_FFI_CallFrame* call_frame) {
  return kCubinLaunch(call_frame);
}
