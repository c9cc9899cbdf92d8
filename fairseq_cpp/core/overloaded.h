#pragma once
// std::visit with one lambda per alternative:
//   std::visit(Overloaded{[](int64_t* p) {...}, [](double* p) {...}}, ref);

namespace fairseq_cpp {

template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace fairseq_cpp
