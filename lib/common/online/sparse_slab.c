/* Groups held whole (sparse_impl.h): when --ram leaves room for a
 * group's whole top tier, it is read once at open into slabs, the layout
 * its kernels stream (engine/kernels.h: bf16/f16/f32; engine/kernels_q.h:
 * q8/q4, for the integer path), and computed from them every pass with no
 * cache lookups, reads or batches: a thread's rows are one stretch of
 * memory streamed in order. Which groups: every one when all fit; at
 * budget 1 (every entry top tier, so a group's every bundle is read each
 * pass) as many as fit in pass order, each one that fits in what the
 * groups before it left, the cache taking the rest; none
 * otherwise, the cache holding the hot entries of all groups.
 * man/sf-run.1 (--ram). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "engine/kernels_q.h"
#include "online/sparse_impl.h"

/* The bytes of group G's slabs, 0 when it cannot be held (resident, or
 * q8/q4 computed by the float path: --activations f32). */
static uint64_t group_bytes(const struct sf_sparse *sp, const struct sf_image_group *G)
{
	uint64_t b = 0;

	if (G->resident)
		return 0;
	for (int i = 0; i < G->nmat; i++) {
		if (sf_dtype_is_block(G->mat[i].dtype) && sp->o.f32_activations)
			return 0;
		b += sf_slab_bytes(G->mat[i].dtype, (size_t)G->mat[i].rows, G->entries);
	}
	return b;
}

uint64_t sparse_slabs_plan(struct sf_sparse *sp, uint64_t room, uint64_t *offloaded,
			   uint64_t *entries)
{
	const struct sf_image *img = sp->img;
	const struct sf_sparse_opts *o = &sp->o;
	size_t ng = (size_t)img->cfg.n_layers * SF_NGROUPS;
	uint64_t all = 0, taken = 0;
	int dense = 1, any = 0;

	if (!sparse_hold_whole(o))
		return 0;
	for (size_t gid = 0; gid < ng; gid++) {
		const struct sf_image_group *G = &img->groups[gid];
		uint64_t b = group_bytes(sp, G);
		if (G->resident)
			continue;
		if (!b)
			return 0;	/* --activations f32: none held */
		all += b;
		any = 1;
		dense &= sp->tiers.k_top[gid] == G->source_entries && !sp->tiers.k_mid[gid];
	}
	if (!any || (all > room && !dense) || !(sp->slab.held = calloc(ng, 1)))
		return 0;
	/* pass order; past a group too large for what is left, a smaller
	 * one may still fit (an attention group is a fifth of an FFN's) */
	for (size_t gid = 0; gid < ng; gid++) {
		const struct sf_image_group *G = &img->groups[gid];
		uint64_t b = group_bytes(sp, G);
		if (G->resident || taken + b > room)
			continue;
		sp->slab.held[gid] = 1;
		sp->slab.groups++;
		taken += b;
		offloaded[gid % SF_NGROUPS] -= (uint64_t)G->entries * G->top_bytes;
		entries[gid % SF_NGROUPS] -= G->entries;
	}
	return taken;
}

int sparse_slabs_load(struct sf_sparse *sp, uint64_t bytes, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	size_t ng = (size_t)img->cfg.n_layers * SF_NGROUPS;
	uint64_t at = 0;
	int ret;

	if (!sp->slab.groups)
		return 0;
	/* huge pages: the kernels stream the slabs (TLB misses) */
	if (!(sp->slab.mat = calloc(ng * SF_GROUP_MAX_MATRICES, sizeof(*sp->slab.mat))) ||
	    !(sp->slab.mem = sf_alloc_large((size_t)bytes, SF_IMAGE_ALIGN)))
		return sf_err_set(e, -ENOMEM, "%s: %llu bytes for the groups held in RAM: %s",
				  img->path, (unsigned long long)bytes, strerror(ENOMEM));
	for (size_t gid = 0; gid < ng; gid++) {
		const struct sf_image_group *G = &img->groups[gid];
		struct sf_slab *s = sp->slab.mat + gid * SF_GROUP_MAX_MATRICES;
		if (!sp->slab.held[gid])
			continue;
		for (int i = 0; i < G->nmat; i++) {
			sf_slab_init(&s[i], sp->slab.mem + at, G->mat[i].dtype, (size_t)G->mat[i].rows,
				      G->entries);
			at += sf_slab_bytes(G->mat[i].dtype, (size_t)G->mat[i].rows, G->entries);
		}
		/* the region in pieces the read buffer holds, each bundle then
		 * spread over its matrices' slabs */
		uint64_t per = sp->io.buf_bytes / G->top_bytes;
		for (uint32_t p0 = 0; p0 < G->entries; p0 += (uint32_t)per) {
			uint32_t p1 = G->entries - p0 < per ? G->entries : p0 + (uint32_t)per;
			uint64_t off = G->top->offset + (uint64_t)p0 * G->top_bytes;
			uint64_t len = (uint64_t)(p1 - p0) * G->top_bytes;
			if ((ret = sparse_pread_once(img, sp->io.arena, len, off, e)))
				return ret;
			for (uint32_t p = p0; p < p1; p++)
				for (int i = 0; i < G->nmat; i++)
					sf_slab_put(&s[i], p, sp->io.arena + (uint64_t)(p - p0) * G->top_bytes +
								       G->mat[i].offset);
		}
	}
	return 0;
}

void sparse_slabs_free(struct sf_sparse *sp)
{
	free(sp->slab.mat);
	free(sp->slab.mem);
	free(sp->slab.held);
}
