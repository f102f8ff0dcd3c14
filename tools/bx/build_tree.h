// The source and build folders bx was built from, for commands that build or run helpers kept
// in the tree (the gRPC echo peer of `bx bench rpc`). Empty when unknown.
#pragma once

#include <string>

namespace bx::tools {

std::string SourceDir();
std::string BinaryDir();

}  // namespace bx::tools
