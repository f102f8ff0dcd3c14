// The paths are compiled into this file alone (CMake sets them on it): the rest of the layer
// then compiles to the same objects in every build tree, and a compiler cache shared between
// clones in different folders hits them.
#include "verbs/simnic_paths.h"

namespace bx::verbs {

std::vector<std::string> BuiltInSimnicPaths() {
  std::vector<std::string> paths;
#ifdef BX_SIMNIC_BUILD_PATH
  paths.push_back(BX_SIMNIC_BUILD_PATH);
#endif
#ifdef BX_SIMNIC_INSTALL_PATH
  paths.push_back(BX_SIMNIC_INSTALL_PATH);
#endif
  return paths;
}

}  // namespace bx::verbs
