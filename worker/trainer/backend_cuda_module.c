/* The CUDA backend, loaded the first time a GPU is asked for (backend.h): backend_cuda.so
 * at BACKEND_CUDA_MODULE_PATH, a path relative to the running program's directory that
 * the build keeps true both in the build tree and once installed. Loaded once, never
 * unloaded (CUDA's libraries do not like to be). */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "worker/trainer/backend.h"

static const backend_cuda_module *loaded;

static int module_load(char *err, size_t err_size) {
    if (loaded)
        return 0;
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        snprintf(err, err_size, "cannot load the CUDA backend: /proc/self/exe: %s", strerror(errno));
        return -ENOENT;
    }
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0'; /* the kernel's path is absolute: there is a slash */
    snprintf(path, sizeof(path), "%s/%s", exe, BACKEND_CUDA_MODULE_PATH);
    void *module = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!module) { /* dlerror names the file, and what it lacks (a missing libcudart, say) */
        snprintf(err, err_size, "cannot load the CUDA backend: %s", dlerror());
        return -ENOENT;
    }
    const backend_cuda_module *m = dlsym(module, BACKEND_CUDA_MODULE_SYMBOL);
    if (!m || m->ops_size != sizeof(backend_ops) || strcmp(m->version, DDP_VERSION) != 0) {
        snprintf(err, err_size, "cannot load the CUDA backend: %s is not this build's (ddp-worker %s, module %s)", path,
                 DDP_VERSION, m ? m->version : "without " BACKEND_CUDA_MODULE_SYMBOL);
        dlclose(module);
        return -ENOEXEC;
    }
    loaded = m;
    return 0;
}

int backend_cuda_open(backend *ret, int device, backend_fatal_fn fatal, void *fatal_ctx, char *err, size_t err_size) {
    int r = module_load(err, err_size);
    return r < 0 ? r : loaded->open(ret, device, fatal, fatal_ctx, err, err_size);
}

int backend_cuda_device_count(char *err, size_t err_size) {
    int r = module_load(err, err_size);
    return r < 0 ? r : loaded->device_count(err, err_size);
}
