// torch_ddpd._C: what torch_ddpd/__init__.py registers with torch.distributed.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.hpp"

PYBIND11_MODULE(_C, m) {
    m.doc() = "libddp as a torch.distributed backend";
    m.def("create_process_group", &torch_ddpd::ProcessGroup::create, pybind11::arg("store"), pybind11::arg("rank"),
          pybind11::arg("world_size"), pybind11::arg("timeout"),
          "Joins the ddpd job as rank of world_size; what Backend.register_backend calls.");
    m.def("shutdown", &torch_ddpd::ProcessGroup::shutdown_all, pybind11::call_guard<pybind11::gil_scoped_release>(),
          "Finishes every group's pending calls and leaves its job (run at exit).");
    m.def(
        "version", [] { return ddp_get_version(); }, "libddp's version code.");
}
