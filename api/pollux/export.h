// POLLUX_API marks what libpollux.so exports. The library is compiled with
// -fvisibility=hidden (and -fvisibility-inlines-hidden), so everything else - the runtime,
// the transports, the API's own internals - stays inside it. Harmless in the static library
// and in a program including these headers.
#pragma once

#define POLLUX_API __attribute__((visibility("default")))
