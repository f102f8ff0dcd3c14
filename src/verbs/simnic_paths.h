// Where this build tree and `cmake --install` put the simnic, for the loader's candidates.
#pragma once

#include <string>
#include <vector>

namespace bx::verbs {

// The build tree's simnic (when this build has one), then the installed one.
std::vector<std::string> BuiltInSimnicPaths();

}  // namespace bx::verbs
