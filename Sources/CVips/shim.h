// libvips (Debian libvips-dev). Swift code uses CVipsSupport, whose functions wrap the variadic libvips calls.
#include <vips/vips.h>
