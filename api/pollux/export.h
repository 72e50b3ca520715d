// POLLUX_API marks what libpollux.so exports. The library is compiled with
// -fvisibility=hidden (and -fvisibility-inlines-hidden), so everything else - the runtime,
// the transports, the API's own internals - stays inside it.
//
// The static library is compiled with POLLUX_STATIC_DEFINE: every symbol of libpollux.a is
// hidden too, which still links into a program (hidden symbols resolve within one link) but is
// not re-exported by a shared library that embeds libpollux.a. A program including these
// headers needs no define either way.
#pragma once

#if defined(POLLUX_STATIC_DEFINE)
#define POLLUX_API
#else
#define POLLUX_API __attribute__((visibility("default")))
#endif
