// fmt's compiled part, for the wheel lane only (CMakeLists.txt, FSQ_FMT): PyTorch's wheel ships the
// headers of fmt 12 but no library, and compiling fmt header-only put its whole implementation
// (format-inl.h) into every translation unit, about 4 s of each one's compile time. This is the one
// unit that defines the functions format.h declares FMT_API, and the template instantiations its
// `extern template` declarations and the inline wrappers in format.h call.
#include <fmt/format-inl.h>

#ifdef FMT_HEADER_ONLY
#error "fmt_definitions.cpp is for a non-header-only build of fmt (FSQ_FMT in CMakeLists.txt)"
#endif

FMT_BEGIN_NAMESPACE

#if FMT_USE_LOCALE
template auto locale_ref::get<std::locale>() const -> std::locale;
#endif

namespace detail {

template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref) -> char;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> wchar_t;

}  // namespace detail

FMT_END_NAMESPACE
