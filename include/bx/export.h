// BX_EXPORT marks what libbexpress.so exports. The library is compiled with hidden visibility, so
// a declaration without it stays inside the library: only the API under include/bx/ is visible
// to programs, and symbols of the layers under src/ cannot clash with a program's own.
#pragma once

#define BX_EXPORT [[gnu::visibility("default")]]
// For a class nested in an exported one that is not part of the API (a pimpl): nested classes
// take their visibility from the enclosing class otherwise.
#define BX_HIDDEN [[gnu::visibility("hidden")]]
