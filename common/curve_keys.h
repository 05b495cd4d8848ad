/* CURVE key pairs (ZeroMQ's, Z85-encoded) in files: ddpd's, and each client's. A key
 * file is INI text, "public = Z85" and "secret = Z85", made by `ddpctl keygen` (0600) and
 * refused when other users may read it. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define CURVE_KEY_Z85 41 /* 40 characters and a NUL */

typedef struct {
    char public_key[CURVE_KEY_Z85], secret_key[CURVE_KEY_Z85];
} curve_keypair;

/* Whether s is a Z85 CURVE key (40 characters that decode to 32 bytes). */
bool curve_key_valid(const char *s);
/* Reads path; err says what is wrong and where. */
int curve_keypair_load(const char *path, curve_keypair *ret, char *err, size_t err_size);
/* Makes a key pair and writes it to path (0600; never over an existing file). */
int curve_keypair_generate(const char *path, curve_keypair *ret, char *err, size_t err_size);
/* A client socket (before connect) talks CURVE to the server whose public key is given. */
int curve_client_setup(void *socket, const char *server_key, const curve_keypair *own);
