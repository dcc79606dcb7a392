// The iris device API: everything a user kernel includes.
//
//   #include "iris/device.cuh"
//   namespace dev = iris::device;
//   __global__ void k(iris::DeviceContext ctx, ...) { ... dev::put_block(ctx, dst, src, n, peer); ... }
//
//   iris/device/common.cuh    Order, Scope, Cmp, thread groups, IRIS_DEVICE_COMPILE
//   iris/device/memory.cuh    translate, rank_of, load/store (plain, 16-byte, atomic), copy/put/get bulk forms
//   iris/device/atomics.cuh   atomic_add/sub/and/or/xor/min/max/xchg/cas with order and scope, fences
//   iris/device/timeout.cuh   SpinBound, global_timer_ns, the device error record
//   iris/device/signal.cuh    wait_until, signal, signal_add, put_*_signal_release
//   iris/device/barrier.cuh   DeviceBarrierHandle, barrier_block
//
// Includable from plain C++ too: then only the POD handles and enums are visible.
#pragma once

#include "iris/device/atomics.cuh"
#include "iris/device/barrier.cuh"
#include "iris/device/common.cuh"
#include "iris/device/device_context.hpp"
#include "iris/device/memory.cuh"
#include "iris/device/signal.cuh"
#include "iris/device/timeout.cuh"
