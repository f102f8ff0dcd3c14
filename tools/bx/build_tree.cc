// The folders are compiled into this file alone (tools/CMakeLists.txt sets them on it): the
// commands that need them then compile to the same objects in every clone, which a compiler
// cache shared between clones in different folders hits.
#include "build_tree.h"

#ifndef BX_SOURCE_DIR
#define BX_SOURCE_DIR ""
#endif
#ifndef BX_BINARY_DIR
#define BX_BINARY_DIR ""
#endif

namespace bx::tools {

std::string SourceDir() {
  return BX_SOURCE_DIR;
}

std::string BinaryDir() {
  return BX_BINARY_DIR;
}

}  // namespace bx::tools
