// The mock engine format: parser, shape inference and a CPU interpreter of identity, add, sub and matmul.
#include <cstring>
#include <set>
#include <sstream>

#include "mock.hpp"

namespace trtshim {
namespace mock {

namespace {

[[noreturn]] void parseError(int line, const std::string& message) {
  fail(TRTSHIM_INVALID_ARGUMENT, "Cannot deserialize mock engine: line " + std::to_string(line) + ": " + message);
}

[[noreturn]] void modelError(const std::string& message) {
  fail(TRTSHIM_INVALID_ARGUMENT, "Cannot deserialize mock engine: " + message);
}

bool parseInt(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); j++)
    if (s[j] < '0' || s[j] > '9') return false;
  try {
    out = std::stoll(s);
  } catch (...) {
    return false;
  }
  return true;
}

Shape parseDims(int line, const std::string& token, bool allowDynamic) {
  Shape dims;
  std::stringstream in(token);
  std::string part;
  while (std::getline(in, part, ',')) {
    int64_t v;
    if (!parseInt(part, v) || v < (allowDynamic ? -1 : 0)) parseError(line, "bad dims '" + token + "'");
    dims.push_back(v);
  }
  if (dims.empty() || dims.size() > TRTSHIM_MAX_DIMS) parseError(line, "bad dims '" + token + "'");
  return dims;
}

size_t opArity(const std::string& kind) {
  if (kind == "identity") return 1;
  if (kind == "add" || kind == "sub" || kind == "matmul") return 2;
  return 0;
}

bool arithmetic(int32_t dtype) {
  return dtype == TRTSHIM_DTYPE_FP32 || dtype == TRTSHIM_DTYPE_INT32 || dtype == TRTSHIM_DTYPE_INT64 ||
         dtype == TRTSHIM_DTYPE_INT8 || dtype == TRTSHIM_DTYPE_UINT8;
}

bool isDynamic(const Shape& s) {
  for (auto d : s)
    if (d < 0) return true;
  return false;
}

int64_t count(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

template <class T>
void elementwise(const std::string& kind, const void* a, const void* b, void* out, int64_t n) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  if (kind == "add") {
    for (int64_t i = 0; i < n; i++) z[i] = static_cast<T>(x[i] + y[i]);
  } else {
    for (int64_t i = 0; i < n; i++) z[i] = static_cast<T>(x[i] - y[i]);
  }
}

template <class T>
void matmul(const void* a, const void* b, void* out, int64_t batches, bool shareB, int64_t m, int64_t k,
            int64_t n) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (int64_t p = 0; p < batches; p++) {
    const T* xa = x + p * m * k;
    const T* yb = y + (shareB ? 0 : p * k * n);
    T* zc = z + p * m * n;
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < n; j++) {
        T acc = 0;
        for (int64_t q = 0; q < k; q++) acc = static_cast<T>(acc + xa[i * k + q] * yb[q * n + j]);
        zc[i * n + j] = acc;
      }
    }
  }
}

template <template <class> class F, class... Args>
void dispatch(int32_t dtype, Args&&... args) {
  switch (dtype) {
    case TRTSHIM_DTYPE_FP32: return F<float>::run(args...);
    case TRTSHIM_DTYPE_INT32: return F<int32_t>::run(args...);
    case TRTSHIM_DTYPE_INT64: return F<int64_t>::run(args...);
    case TRTSHIM_DTYPE_INT8: return F<int8_t>::run(args...);
    case TRTSHIM_DTYPE_UINT8: return F<uint8_t>::run(args...);
    default: fail(TRTSHIM_UNSUPPORTED, std::string("The mock cannot compute on ") + dtypeName(dtype));
  }
}

template <class T>
struct Elementwise {
  static void run(const std::string& kind, const void* a, const void* b, void* out, int64_t n) {
    elementwise<T>(kind, a, b, out, n);
  }
};

template <class T>
struct Matmul {
  static void run(const void* a, const void* b, void* out, int64_t batches, bool shareB, int64_t m, int64_t k,
                  int64_t n) {
    matmul<T>(a, b, out, batches, shareB, m, k, n);
  }
};

}  // namespace

const TensorDesc* Model::find(const std::string& name) const {
  for (const auto& t : io)
    if (t.name == name) return &t;
  return nullptr;
}

Model parse(const std::string& text) {
  Model model;
  std::stringstream in(text);
  std::string raw;
  int line = 0;
  bool header = false;
  std::map<int, std::map<std::string, ProfileShapes>> profiles;
  std::map<std::string, int> producedAt;  // output -> op index
  while (std::getline(in, raw)) {
    line++;
    auto hash = raw.find('#');
    if (hash != std::string::npos) raw.erase(hash);
    std::stringstream words(raw);
    std::vector<std::string> t;
    for (std::string w; words >> w;) t.push_back(w);
    if (t.empty()) continue;
    if (!header) {
      if (t.size() != 2 || t[0] != "trtshim-mock-engine") {
        parseError(line, "expected the header 'trtshim-mock-engine 1'");
      }
      if (t[1] != "1") parseError(line, "format version '" + t[1] + "' is not supported (expected 1)");
      header = true;
      continue;
    }
    const std::string& key = t[0];
    if (key == "input" || key == "output") {
      if (t.size() != 4) parseError(line, "expected '" + key + " NAME DATATYPE DIMS'");
      if (model.find(t[1])) parseError(line, "tensor '" + t[1] + "' is declared twice");
      TensorDesc d;
      d.name = t[1];
      d.mode = key == "input" ? TRTSHIM_IO_INPUT : TRTSHIM_IO_OUTPUT;
      d.dtype = dtypeFromName(t[2]);
      if (d.dtype == TRTSHIM_DTYPE_INVALID) parseError(line, "unknown datatype '" + t[2] + "'");
      d.dims = parseDims(line, t[3], true);
      model.io.push_back(d);
    } else if (key == "op") {
      if (t.size() < 2) parseError(line, "expected 'op KIND INPUTS... OUTPUT'");
      size_t arity = opArity(t[1]);
      if (arity == 0) parseError(line, "unknown op '" + t[1] + "' (expected identity, add, sub or matmul)");
      if (t.size() != arity + 3) {
        parseError(line, "op " + t[1] + " takes " + std::to_string(arity) + " inputs and one output");
      }
      Op op;
      op.kind = t[1];
      op.inputs.assign(t.begin() + 2, t.begin() + 2 + static_cast<long>(arity));
      op.output = t.back();
      for (const auto& name : op.inputs) {
        const TensorDesc* d = model.find(name);
        if (!d) parseError(line, "op " + op.kind + " reads undeclared tensor '" + name + "'");
        if (d->mode == TRTSHIM_IO_OUTPUT && !producedAt.count(name)) {
          parseError(line, "op " + op.kind + " reads output '" + name + "' before an op produces it");
        }
      }
      const TensorDesc* out = model.find(op.output);
      if (!out || out->mode != TRTSHIM_IO_OUTPUT) {
        parseError(line, "op " + op.kind + " writes '" + op.output + "', which is not a declared output");
      }
      if (producedAt.count(op.output)) parseError(line, "output '" + op.output + "' is produced twice");
      for (const auto& name : op.inputs) {
        const TensorDesc* d = model.find(name);
        if (d->dtype != out->dtype) {
          parseError(line, "op " + op.kind + ": '" + name + "' is " + dtypeName(d->dtype) + " but '" +
                               op.output + "' is " + dtypeName(out->dtype));
        }
        if (op.kind != "identity" && !arithmetic(d->dtype)) {
          parseError(line, std::string("op ") + op.kind + " does not support " + dtypeName(d->dtype));
        }
        if (op.kind == "matmul" && d->dims.size() < 2) {
          parseError(line, "op matmul needs inputs of rank 2 or more ('" + name + "' has rank " +
                               std::to_string(d->dims.size()) + ")");
        }
        if (op.kind != "matmul" && d->dims.size() != out->dims.size()) {
          parseError(line, "op " + op.kind + ": '" + name + "' and '" + op.output + "' differ in rank");
        }
      }
      producedAt[op.output] = static_cast<int>(model.ops.size());
      model.ops.push_back(op);
    } else if (key == "profile") {
      if (t.size() != 6) parseError(line, "expected 'profile INDEX INPUT MIN OPT MAX'");
      int64_t index;
      if (!parseInt(t[1], index) || index < 0 || index > 63) parseError(line, "bad profile index '" + t[1] + "'");
      const TensorDesc* d = model.find(t[2]);
      if (!d || d->mode != TRTSHIM_IO_INPUT) parseError(line, "profile names unknown input '" + t[2] + "'");
      ProfileShapes p{parseDims(line, t[3], false), parseDims(line, t[4], false), parseDims(line, t[5], false)};
      for (const Shape* s : {&p.min, &p.opt, &p.max}) {
        if (s->size() != d->dims.size()) parseError(line, "profile shape rank differs from '" + d->name + "'");
        for (size_t i = 0; i < s->size(); i++) {
          if (d->dims[i] >= 0 && (*s)[i] != d->dims[i]) {
            parseError(line, "profile shape " + formatShape(*s) + " does not match the dims " +
                                 formatShape(d->dims) + " of '" + d->name + "'");
          }
        }
      }
      for (size_t i = 0; i < p.min.size(); i++) {
        if (p.min[i] > p.opt[i] || p.opt[i] > p.max[i]) parseError(line, "profile needs min <= opt <= max");
      }
      if (profiles[static_cast<int>(index)].count(d->name)) {
        parseError(line, "profile " + t[1] + " gives '" + d->name + "' twice");
      }
      profiles[static_cast<int>(index)][d->name] = p;
    } else if (key == "compute_capability") {
      if (t.size() != 2 || t[1].find('.') == std::string::npos) parseError(line, "expected 'compute_capability X.Y'");
      model.computeCapability = t[1];
    } else if (key == "delay_ms") {
      int64_t v;
      if (t.size() != 2 || !parseInt(t[1], v) || v < 0 || v > 60000) parseError(line, "expected 'delay_ms N'");
      model.delayMs = static_cast<int>(v);
    } else {
      parseError(line, "unknown keyword '" + key + "'");
    }
  }
  if (!header) modelError("the file is empty");
  bool anyOutput = false;
  for (const auto& d : model.io) {
    if (d.mode != TRTSHIM_IO_OUTPUT) continue;
    anyOutput = true;
    if (!producedAt.count(d.name)) modelError("output '" + d.name + "' is produced by no op");
  }
  if (!anyOutput) modelError("the engine declares no output");
  int nprof = profiles.empty() ? 1 : profiles.rbegin()->first + 1;
  model.profiles.resize(static_cast<size_t>(nprof));
  for (int p = 0; p < nprof; p++) {
    auto& given = profiles[p];
    for (const auto& d : model.io) {
      if (d.mode != TRTSHIM_IO_INPUT) continue;
      auto it = given.find(d.name);
      if (it != given.end()) {
        model.profiles[static_cast<size_t>(p)][d.name] = it->second;
      } else if (isDynamic(d.dims)) {
        modelError("profile " + std::to_string(p) + " gives no shapes for dynamic input '" + d.name + "'");
      } else {
        model.profiles[static_cast<size_t>(p)][d.name] = ProfileShapes{d.dims, d.dims, d.dims};
      }
    }
  }
  return model;
}

std::map<std::string, Shape> inferShapes(const Model& model, const std::map<std::string, Shape>& inputs) {
  std::map<std::string, Shape> shapes = inputs;
  for (const auto& op : model.ops) {
    const Shape& a = shapes.at(op.inputs[0]);
    Shape out;
    if (op.kind == "identity") {
      out = a;
    } else if (op.kind == "add" || op.kind == "sub") {
      const Shape& b = shapes.at(op.inputs[1]);
      if (a != b) {
        fail(TRTSHIM_INVALID_ARGUMENT, "Cannot run op " + op.kind + ": '" + op.inputs[0] + "' has shape " +
                                           formatShape(a) + " but '" + op.inputs[1] + "' has shape " +
                                           formatShape(b));
      }
      out = a;
    } else {  // matmul
      const Shape& b = shapes.at(op.inputs[1]);
      size_t ra = a.size(), rb = b.size();
      bool ok = a[ra - 1] == b[rb - 2] && (rb == 2 || (ra == rb && std::equal(a.begin(), a.end() - 2, b.begin())));
      if (!ok) {
        fail(TRTSHIM_INVALID_ARGUMENT, "Cannot run op matmul: shapes " + formatShape(a) + " and " +
                                           formatShape(b) + " do not multiply");
      }
      out.assign(a.begin(), a.end() - 1);
      out.push_back(b[rb - 1]);
    }
    const TensorDesc* d = model.find(op.output);
    bool fits = out.size() == d->dims.size();
    for (size_t i = 0; fits && i < out.size(); i++) fits = d->dims[i] < 0 || d->dims[i] == out[i];
    if (!fits) {
      fail(TRTSHIM_INVALID_ARGUMENT, "Output '" + op.output + "' would have shape " + formatShape(out) +
                                         ", which does not match its dims " + formatShape(d->dims));
    }
    shapes[op.output] = out;
  }
  return shapes;
}

void execute(const Model& model, const std::map<std::string, Shape>& shapes,
             const std::map<std::string, void*>& addresses) {
  for (const auto& op : model.ops) {
    const TensorDesc* d = model.find(op.output);
    void* out = addresses.at(op.output);
    const void* a = addresses.at(op.inputs[0]);
    const Shape& sa = shapes.at(op.inputs[0]);
    int64_t n = count(shapes.at(op.output));
    if (n == 0) continue;
    if (op.kind == "identity") {
      if (out != a) std::memmove(out, a, static_cast<size_t>(n) * dtypeSize(d->dtype));
    } else if (op.kind == "add" || op.kind == "sub") {
      dispatch<Elementwise>(d->dtype, op.kind, a, addresses.at(op.inputs[1]), out, n);
    } else {
      const Shape& sb = shapes.at(op.inputs[1]);
      int64_t m = sa[sa.size() - 2], k = sa[sa.size() - 1], cols = sb[sb.size() - 1];
      int64_t batches = count(Shape(sa.begin(), sa.end() - 2));
      dispatch<Matmul>(d->dtype, a, addresses.at(op.inputs[1]), out, batches, sb.size() == 2, m, k, cols);
    }
  }
}

}  // namespace mock
}  // namespace trtshim
