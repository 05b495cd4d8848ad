// How torch's element types and reduce ops map onto libddp's: a reduction needs a type
// libddp computes in; moving data (broadcast, gather, send...) works on any type as bytes.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "ddp/ddp.h"

namespace torch_ddpd {

// A libddp call's element type and count for a tensor's data.
struct Elements {
    ddp_dtype dtype;
    size_t count;
};

// For reductions: throws (naming the operation) where libddp cannot reduce this type
// with this op. op is adjusted where a type needs it (bool: SUM is MAX, PRODUCT is MIN).
Elements reduction_elements(const at::Tensor &t, c10d::ReduceOp::RedOpType *op, const char *operation);
// For data movement: the tensor's own type where libddp has it (so that ranks that
// disagree on it are told), else its bytes.
Elements movement_elements(const at::Tensor &t);
// The bytes of one element of a libddp type.
size_t element_bytes(ddp_dtype dtype);
// libddp's op for torch's; throws, naming the operation, for those libddp lacks.
ddp_op reduce_op(c10d::ReduceOp::RedOpType op, const char *operation);

} // namespace torch_ddpd
