#ifndef CACHET_COPENSSL_TLS_SHIM_H
#define CACHET_COPENSSL_TLS_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

/// TLS 1.2 at least (SSL_CTX_set_min_proto_version is a macro).
static inline int cachet_tls_ctx_minimum_tls12(SSL_CTX *context) {
    return (int)SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
}

/// Partial writes, and a write buffer that may move between retries (SSL_set_mode is a macro).
static inline void cachet_tls_partial_writes(SSL *session) {
    SSL_set_mode(session, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

/// Reads fetch as many bytes as the socket holds, not one record's header then its body (a macro).
static inline void cachet_tls_ctx_read_ahead(SSL_CTX *context) {
    SSL_CTX_set_read_ahead(context, 1);
}

/// The server name sent in the ClientHello (SNI; SSL_set_tlsext_host_name is a macro).
static inline int cachet_tls_server_name(SSL *session, const char *name) {
    return (int)SSL_set_tlsext_host_name(session, name);
}

/// The error queue's first entry as text, and clears the queue; 0 when it is empty.
static inline unsigned long cachet_tls_take_error(char *buffer, size_t length) {
    unsigned long first = ERR_get_error();
    if (first != 0) { ERR_error_string_n(first, buffer, length); }
    ERR_clear_error();
    return first;
}
#endif
