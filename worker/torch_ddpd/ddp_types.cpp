#include "ddp_types.hpp"

#include <c10/util/Exception.h>

namespace torch_ddpd {

namespace {

bool libddp_type(at::ScalarType s, ddp_dtype *ret) {
    switch (s) {
    case at::kFloat:
        *ret = DDP_F32;
        return true;
    case at::kDouble:
        *ret = DDP_F64;
        return true;
    case at::kHalf:
        *ret = DDP_F16;
        return true;
    case at::kBFloat16:
        *ret = DDP_BF16;
        return true;
    case at::kInt:
        *ret = DDP_I32;
        return true;
    case at::kLong:
        *ret = DDP_I64;
        return true;
    case at::kByte:
        *ret = DDP_U8;
        return true;
    default:
        return false;
    }
}

const char *op_name(c10d::ReduceOp::RedOpType op) {
    switch (op) {
    case c10d::ReduceOp::SUM:
        return "SUM";
    case c10d::ReduceOp::AVG:
        return "AVG";
    case c10d::ReduceOp::PRODUCT:
        return "PRODUCT";
    case c10d::ReduceOp::MIN:
        return "MIN";
    case c10d::ReduceOp::MAX:
        return "MAX";
    case c10d::ReduceOp::BAND:
        return "BAND";
    case c10d::ReduceOp::BOR:
        return "BOR";
    case c10d::ReduceOp::BXOR:
        return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
        return "PREMUL_SUM";
    default:
        return "an unknown op";
    }
}

} // namespace

ddp_op reduce_op(c10d::ReduceOp::RedOpType op, const char *operation) {
    switch (op) {
    case c10d::ReduceOp::SUM:
        return DDP_SUM;
    case c10d::ReduceOp::AVG:
        return DDP_AVG;
    case c10d::ReduceOp::PRODUCT:
        return DDP_PROD;
    case c10d::ReduceOp::MIN:
        return DDP_MIN;
    case c10d::ReduceOp::MAX:
        return DDP_MAX;
    default:
        TORCH_CHECK(false, "ddpd: ", operation, " with ReduceOp.", op_name(op),
                    " is not supported (libddp has SUM, AVG, PRODUCT, MIN and MAX)");
    }
}

Elements reduction_elements(const at::Tensor &t, c10d::ReduceOp::RedOpType *op, const char *operation) {
    ddp_dtype dtype;
    if (libddp_type(t.scalar_type(), &dtype)) {
        TORCH_CHECK(*op != c10d::ReduceOp::AVG || at::isFloatingType(t.scalar_type()), "ddpd: ", operation,
                    " with ReduceOp.AVG needs a floating-point tensor, not ", t.scalar_type());
        return {dtype, (size_t)t.numel()};
    }
    if (t.scalar_type() == at::kBool) { // as NCCL does: a sum of truths is "any", a product "all"
        if (*op == c10d::ReduceOp::SUM || *op == c10d::ReduceOp::MAX)
            *op = c10d::ReduceOp::MAX;
        else if (*op == c10d::ReduceOp::PRODUCT || *op == c10d::ReduceOp::MIN)
            *op = c10d::ReduceOp::MIN;
        else
            TORCH_CHECK(false, "ddpd: ", operation, " with ReduceOp.", op_name(*op), " is not supported on bool");
        return {DDP_U8, (size_t)t.numel()};
    }
    if (t.scalar_type() == at::kChar) { // two's complement: int8's sum and product are uint8's bits
        TORCH_CHECK(*op == c10d::ReduceOp::SUM || *op == c10d::ReduceOp::PRODUCT, "ddpd: ", operation,
                    " with ReduceOp.", op_name(*op), " is not supported on int8 (SUM and PRODUCT are)");
        return {DDP_U8, (size_t)t.numel()};
    }
    TORCH_CHECK(false, "ddpd: ", operation, " cannot reduce ", t.scalar_type(),
                " tensors (libddp reduces float32, float64, float16, bfloat16, int32, int64, uint8, int8 and bool)");
}

size_t element_bytes(ddp_dtype dtype) {
    switch (dtype) {
    case DDP_F64:
    case DDP_I64:
        return 8;
    case DDP_F32:
    case DDP_I32:
        return 4;
    case DDP_F16:
    case DDP_BF16:
        return 2;
    default:
        return 1;
    }
}

Elements movement_elements(const at::Tensor &t) {
    ddp_dtype dtype;
    if (libddp_type(t.scalar_type(), &dtype))
        return {dtype, (size_t)t.numel()};
    return {DDP_U8, (size_t)t.numel() * t.element_size()};
}

} // namespace torch_ddpd
