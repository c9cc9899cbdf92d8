#pragma once
// LibTorch's autocast switch and dtype of one device kind, read and set the same way in 1.13 (one
// function per device kind) and 2.4+ (the device type as an argument). Mixed precision (optim/)
// and activation checkpointing (nn/, which replays a forward pass under its autocast state) use it.

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace fairseq_cpp::compat {

struct AutocastState {
  bool enabled = false;                                // autocast on for this device kind
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // the lower precision it casts to
};

AutocastState autocast_state(c10::DeviceType device);
void set_autocast_state(c10::DeviceType device, const AutocastState& state);

// `state` for `device` in this scope; the state before it is restored at its end.
class AutocastStateScope {
 public:
  AutocastStateScope(c10::DeviceType device, const AutocastState& state)
      : device_(device), previous_(autocast_state(device)) {
    set_autocast_state(device_, state);
  }
  ~AutocastStateScope() { set_autocast_state(device_, previous_); }
  AutocastStateScope(const AutocastStateScope&) = delete;
  AutocastStateScope& operator=(const AutocastStateScope&) = delete;

 private:
  c10::DeviceType device_;
  AutocastState previous_;
};

}  // namespace fairseq_cpp::compat
