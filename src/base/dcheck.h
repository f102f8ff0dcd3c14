// BX_DCHECK(condition): a rule the code relies on but its types cannot enforce (which thread may
// call a method), checked in Debug and sanitizer builds. Under NDEBUG (the optimised build) the
// condition is compiled but never evaluated, so a check costs nothing there and still cannot
// rot. A failed check aborts through FatalError, naming the condition and its file:line.
#pragma once

namespace bx::internal {

[[noreturn]] void DcheckFailed(const char* condition, const char* file, int line);

}  // namespace bx::internal

#ifdef NDEBUG
#define BX_DCHECK(condition) static_cast<void>(sizeof(static_cast<bool>(condition)))
#else
#define BX_DCHECK(condition)          \
  ((condition) ? static_cast<void>(0) \
               : ::bx::internal::DcheckFailed(#condition, __FILE__, __LINE__))
#endif
