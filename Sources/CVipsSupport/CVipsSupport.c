#include "CVipsSupport.h"
#include <vips/vips.h>
#include <string.h>

static __thread char last_error[512];

static int fail(void) {
    const char *text = vips_error_buffer();
    strncpy(last_error, text ? text : "libvips failed", sizeof(last_error) - 1);
    last_error[sizeof(last_error) - 1] = 0;
    vips_error_clear();
    return -1;
}

int as_vips_start(void) {
    if (VIPS_INIT("account-service")) return fail();
    // The service keeps no decoded images: no operation cache.
    vips_cache_set_max(0);
    return 0;
}

int as_vips_inspect(const void *buf, size_t len, int *width, int *height, int *pages, int *bands) {
    // Truncated or corrupt data is an error, not a warning; the first frame is decoded in full (vips_avg reads every
    // pixel) after the header's size was read, so a huge declared size is refused by the caller's rules first.
    VipsImage *image = vips_image_new_from_buffer(buf, len, "", "access", VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_TRUNCATED, NULL);
    if (!image) return fail();
    if (vips_image_get_width(image) <= 4096 && vips_image_get_page_height(image) <= 4096) {
        double average = 0;
        if (vips_avg(image, &average, NULL)) {
            g_object_unref(image);
            return fail();
        }
    }
    *width = vips_image_get_width(image);
    *height = vips_image_get_page_height(image);
    *pages = vips_image_get_n_pages(image);
    *bands = vips_image_get_bands(image);
    g_object_unref(image);
    return 0;
}

int as_vips_thumbnail_png(const void *buf, size_t len, int size, void **out, size_t *out_len) {
    VipsImage *thumb = NULL;
    if (vips_thumbnail_buffer((void *)buf, len, &thumb, size, "height", size, NULL)) return fail();
    int status = vips_pngsave_buffer(thumb, out, out_len, "compression", 9, NULL);
    g_object_unref(thumb);
    return status ? fail() : 0;
}

int as_vips_optimise_png(const void *buf, size_t len, void **out, size_t *out_len) {
    VipsImage *image = vips_image_new_from_buffer(buf, len, "", NULL);
    if (!image) return fail();
    int status = vips_pngsave_buffer(image, out, out_len, "compression", 9, "strip", TRUE, NULL);
    g_object_unref(image);
    return status ? fail() : 0;
}

int as_vips_test_image(int width, int height, int pages, const char *suffix, void **out, size_t *out_len) {
    VipsImage *x = NULL, *xb = NULL, *scaled = NULL, *rgb = NULL, *mask = NULL, *rgba = NULL, *joined = NULL;
    int status = -1;
    // A gradient in three colour bands, opaque on the left half and transparent on the right.
    if (vips_xyz(&x, width, height, NULL)) goto done;
    if (vips_extract_band(x, &xb, 0, NULL)) goto done;
    if (vips_linear1(xb, &scaled, 255.0 / (width > 1 ? width - 1 : 1), 0, "uchar", TRUE, NULL)) goto done;
    VipsImage *bands[3] = {scaled, scaled, scaled};
    if (vips_bandjoin(bands, &rgb, 3, NULL)) goto done;
    if (vips_relational_const1(scaled, &mask, VIPS_OPERATION_RELATIONAL_LESS, 128, NULL)) goto done;
    VipsImage *parts[2] = {rgb, mask};
    if (vips_bandjoin(parts, &rgba, 2, NULL)) goto done;
    VipsImage *result = rgba;
    if (pages > 1) {
        // Frames stacked vertically with page-height set: libvips' form of an animation.
        VipsImage *frames[64];
        int n = pages > 64 ? 64 : pages;
        for (int i = 0; i < n; i++) frames[i] = rgba;
        if (vips_arrayjoin(frames, &joined, n, "across", 1, NULL)) goto done;
        vips_image_set_int(joined, "page-height", height);
        int delays[64];
        for (int i = 0; i < n; i++) delays[i] = 100;
        vips_image_set_array_int(joined, "delay", delays, n);
        result = joined;
    }
    if (vips_image_write_to_buffer(result, suffix, out, out_len, NULL)) goto done;
    status = 0;
done:
    if (x) g_object_unref(x);
    if (xb) g_object_unref(xb);
    if (scaled) g_object_unref(scaled);
    if (rgb) g_object_unref(rgb);
    if (mask) g_object_unref(mask);
    if (rgba) g_object_unref(rgba);
    if (joined) g_object_unref(joined);
    return status ? fail() : 0;
}

void as_vips_free(void *p) { g_free(p); }

const char *as_vips_last_error(void) { return last_error; }
