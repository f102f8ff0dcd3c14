// Whether this is an ASan or TSan build, for tests that size their work to it.
#pragma once

namespace bx {

// __has_feature is Clang's (GCC 12 lacks it; GCC predefines __SANITIZE_* instead, Clang 14 only
// __SANITIZE_ADDRESS__).
#if defined(__has_feature)
#define BX_HAS_FEATURE(feature) __has_feature(feature)
#else
#define BX_HAS_FEATURE(feature) 0
#endif

#if defined(__SANITIZE_ADDRESS__) || BX_HAS_FEATURE(address_sanitizer)
inline constexpr bool kAddressSanitizerBuild = true;
#else
inline constexpr bool kAddressSanitizerBuild = false;
#endif

// TSan alone, whose checked memcpy and memcmp cost several times ASan's.
#if defined(__SANITIZE_THREAD__) || BX_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kThreadSanitizerBuild = true;
#else
inline constexpr bool kThreadSanitizerBuild = false;
#endif

#undef BX_HAS_FEATURE

inline constexpr bool kSanitizerBuild = kAddressSanitizerBuild || kThreadSanitizerBuild;

}  // namespace bx
