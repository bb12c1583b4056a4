/* xfer_version(): the version of the library that is loaded, which can
 * differ from the header a program was compiled with. The header's macros
 * are the one source of the version: CMake and the Python package read them
 * (CMakeLists.txt checks that python/xfer/_version.py agrees). */
#include "xfer.h"

#define XFER_STR_(x) #x
#define XFER_STR(x) XFER_STR_(x)

const char *xfer_version(void)
{
	return XFER_STR(XFER_VERSION_MAJOR) "." XFER_STR(XFER_VERSION_MINOR) "." XFER_STR(XFER_VERSION_PATCH);
}
