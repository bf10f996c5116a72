#include "core/nn/layer.h"

#include "core/error.h"

namespace scalelab {

void Layer::set_precision(DType compute) {
  if (compute != DType::f32)
    throw Error("nn", name_ + " cannot compute in " + dtype_name(compute) +
                          " — mixed precision (--amp) is not written for this kind of layer; run it in f32");
  compute_ = compute;
}

}  // namespace scalelab
