/* A file truncated while open (issue 9): sf_image_verify, what sf-pack
 * --verify runs, reads through pread and notices the size changed; the
 * header and resident regions sf_image_open read stay whole in memory
 * (they were once mapped, and touching a page past the new end raised
 * SIGBUS); a flash read through the io_uring layer past the new end fails
 * with -EIO instead of handing back a short buffer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/image.h"
#include "formats/model.h"
#include "unit.h"
#include "online/uring.h"

/* A sum over every byte of the resident tensors and the header's texts. */
static uint64_t resident_sum(const struct sf_image *img)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < img->tensors.ntensors; i++) {
		const struct sf_tensor *T = &img->tensors.tensors[i];
		for (uint64_t b = 0; T->data && b < T->nbytes; b++)
			sum = sum * 31 + ((const uint8_t *)T->data)[b];
	}
	for (size_t b = 0; b < img->config_len; b++)
		sum = sum * 31 + (uint8_t)img->config_text[b];
	for (size_t b = 0; b < img->tokenizer_len; b++)
		sum = sum * 31 + (uint8_t)img->tokenizer_text[b];
	return sum;
}

int main(void)
{
	char dir[4096], model_dir[4096], path[4200], want[8192];
	struct sf_image img;
	struct sf_model m;
	struct sf_err e = { 0 };
	uint64_t size = 0;

	snprintf(model_dir, sizeof(model_dir), "%s/models/mix4-1m", unit_env("SF_ROOT", "."));
	snprintf(dir, sizeof(dir), "%s/test_faults.XXXXXX", unit_env("SF_TMP", "/tmp"));
	if (!mkdtemp(dir))
		unit_skip("cannot make a scratch directory");
	snprintf(path, sizeof(path), "%s/a.sfimg", dir);
	if (sf_model_open(&m, model_dir, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	struct sf_image_pack_opts o = { .model = &m, .model_dir = model_dir,
					.dtype = SF_IMAGE_DTYPE_KEEP };
	CHECK(sf_image_pack(path, &o, &size, &e) == 0, "pack: %s", e.msg);
	sf_model_close(&m);

	CHECK(sf_image_open(&img, path, &e) == 0, "open: %s", e.msg);
	const struct sf_image_region *last = &img.regions[img.nregions - 1];
	CHECK(sf_image_verify(&img, &e) == 0, "verify before: %s", e.msg);
	uint64_t before = resident_sum(&img);
	CHECK(truncate(path, (off_t)(size / 2)) == 0, "truncate: %s", strerror(errno));
	CHECK(sf_image_verify(&img, &e) == SF_EFORMAT, "verify after truncation");
	snprintf(want, sizeof(want), "%s: %llu bytes, %llu when opened: the file changed while open",
		 path, (unsigned long long)(size / 2), (unsigned long long)size);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	CHECK(truncate(path, SF_IMAGE_PREAMBLE) == 0, "truncate: %s", strerror(errno));
	CHECK(resident_sum(&img) == before, "resident bytes changed after truncation");

	/* the last region (flash) now lies past the end */
	struct sf_uring_opts uo = { .buffered = 1 };
	struct sf_uring *u;
	uint64_t off = last->offset & ~(uint64_t)(SF_URING_ALIGN - 1), tag = 0;
	void *buf;
	CHECK(posix_memalign(&buf, SF_URING_ALIGN, SF_URING_ALIGN) == 0, "memalign");
	CHECK(truncate(path, (off_t)size) == 0 && sf_uring_open(&u, path, &uo, &e) == 0, "uring: %s",
	      e.msg);
	CHECK(truncate(path, (off_t)off) == 0, "truncate: %s", strerror(errno));
	CHECK(sf_uring_queue(u, off, SF_URING_ALIGN, buf, 7, &e) == 0, "queue: %s", e.msg);
	CHECK(sf_uring_submit(u, &e) >= 0, "submit: %s", e.msg);
	int ret = sf_uring_reap(u, &tag, 1, &e);
	CHECK(ret == -EIO && tag == 7, "read past the end: %d: %s", ret, e.msg);
	sf_uring_close(u);
	free(buf);
	sf_image_close(&img);

	snprintf(want, sizeof(want), "rm -rf '%s'", dir);
	CHECK(system(want) == 0, "cleanup");
	return unit_exit();
}
