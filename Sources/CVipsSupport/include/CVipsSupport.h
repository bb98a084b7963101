#ifndef CVIPSSUPPORT_H
#define CVIPSSUPPORT_H
#include <stddef.h>

// Plain functions over libvips for Swift (which cannot call C variadic functions). Every function returns 0 on
// success and -1 on failure (as_vips_last_error then says why). Buffers returned through `out` are freed with
// as_vips_free.

int as_vips_start(void);
// What the image is, read from its header: width and height of one page, page count (animated GIF/WebP), bands.
int as_vips_inspect(const void *buf, size_t len, int *width, int *height, int *pages, int *bands);
// A thumbnail that fits `size` x `size` (aspect kept, first page), as PNG with alpha kept.
int as_vips_thumbnail_png(const void *buf, size_t len, int size, void **out, size_t *out_len);
// The image re-encoded as PNG at the highest zlib compression (lossless); for PNG input only.
int as_vips_optimise_png(const void *buf, size_t len, void **out, size_t *out_len);
// A test image: `width` x `height` RGBA (a gradient with a transparent half), `pages` frames (an animation when more
// than one), saved in the format of `suffix` (".png", ".gif", ".webp").
int as_vips_test_image(int width, int height, int pages, const char *suffix, void **out, size_t *out_len);
void as_vips_free(void *p);
// The last error text of this thread (empty when none).
const char *as_vips_last_error(void);

#endif
