/* python_sanitized: the Python interpreter as a sanitized program, for the
 * python test of a build with b_sanitize (tests/python/meson.build).
 *
 * A sanitized extension (rkv._rkv) needs the ASan runtime as the process's
 * first library. python3 is not instrumented; preloading the runtime into it
 * (LD_PRELOAD) failed now and then in the guest and every time in CI (the
 * runtime refused to start during pytest's collection). This program is
 * compiled and linked with the build's sanitizer flags, so the linker puts the
 * runtime first in its own DT_NEEDED list, and embeds the interpreter
 * (libpython): no preload, no link-order check to turn off. */
#include <Python.h>

/* The interpreter keeps its objects at exit: LeakSanitizer would report them. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

int main(int argc, char **argv) { return Py_BytesMain(argc, argv); }
