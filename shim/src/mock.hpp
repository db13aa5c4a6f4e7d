// The MOCK engine: a small text format (see shim/README.md) parsed into a model that runs on the CPU.
// Separate from mock.cpp's runtime so that the unit tests can use it directly.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shim.hpp"

namespace trtshim {
namespace mock {

/** One operation of a mock engine: `op KIND IN... OUT`. */
struct Op {
  std::string kind;  // identity, add, sub, matmul
  std::vector<std::string> inputs;
  std::string output;
};

/** A profile's min/opt/max of one input. */
struct ProfileShapes {
  Shape min, opt, max;
};

/** A parsed mock engine. */
struct Model {
  std::vector<TensorDesc> io;
  std::vector<Op> ops;
  /** profiles[p][input] */
  std::vector<std::map<std::string, ProfileShapes>> profiles;
  /** "8.6"; empty when the engine runs on any device. */
  std::string computeCapability;
  int delayMs = 0;

  const TensorDesc* find(const std::string& name) const;
};

/** Parses an engine file; throws INVALID_ARGUMENT "Cannot deserialize mock engine: line N: ...". */
Model parse(const std::string& text);

/**
 * The shape of every tensor given the input shapes (outputs computed from their ops); throws
 * INVALID_ARGUMENT when shapes do not fit an op.
 */
std::map<std::string, Shape> inferShapes(const Model& model, const std::map<std::string, Shape>& inputs);

/** Runs the ops over tensor addresses with the given shapes (from inferShapes). */
void execute(const Model& model, const std::map<std::string, Shape>& shapes,
             const std::map<std::string, void*>& addresses);

}  // namespace mock
}  // namespace trtshim
