#pragma once
// Device-parameterized suites: a test that takes a device runs on the CPU always and on CUDA where
// LibTorch sees a GPU, and its name ends in the device (`.../cpu`, `.../cuda`). gtest_discover_tests
// lists the tests at build time, so a build on the GPU machine registers the CUDA instances and
// `ctest -N | grep /cuda` counts them (tools/gpu/run.sh reports that count).
//
//   class Thing : public ::testing::TestWithParam<std::string> { ... torch::Device(GetParam()) ... };
//   INSTANTIATE_TEST_SUITE_P(Devices, Thing, ::testing::ValuesIn(testing::test_devices()),
//                            testing::device_name);

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>
#include <vector>

namespace fairseq_cpp::testing {

// "cpu", then "cuda:0" where a GPU is present: with its index, the device that tensors made on
// "cuda" report (a gang checks its tensors' device exactly).
inline std::vector<std::string> test_devices() {
  std::vector<std::string> out{"cpu"};
  if (torch::cuda::is_available()) out.push_back("cuda:0");
  return out;
}

// "cpu", "cuda": a device's name as a test name's part (gtest names take no ':').
inline std::string device_suffix(const std::string& device) { return device.substr(0, device.find(':')); }

// The test name's suffix: the device.
inline std::string device_name(const ::testing::TestParamInfo<std::string>& info) { return device_suffix(info.param); }

}  // namespace fairseq_cpp::testing
