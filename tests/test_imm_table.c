/* The immediate table against a simple model under random insert/delete:
 * lookups after backward-shift deletion must never lose an entry. */
#include <string.h>

#include "helpers.h"
#include "util/imm_table.h"

#define LIMIT 64
#define KEYS 200

int main(void)
{
	struct imm_table t;
	CHECK_RC(xi_imm_table_init(&t, 0), -EINVAL);
	CHECK_OK(xi_imm_table_init(&t, LIMIT));
	uint32_t model[KEYS];
	bool present[KEYS];
	memset(present, 0, sizeof(present));
	memset(model, 0, sizeof(model));
	uint64_t s = 42;
	unsigned used = 0;
	for (int step = 0; step < 200000; step++) {
		uint32_t k = (uint32_t)(t_rand(&s) % KEYS);
		/* Keys collide in the low bits on purpose to make long probe runs. */
		uint32_t imm = k * 1024u;
		if (t_rand(&s) % 3) {
			struct imm_entry *en = xi_imm_table_get(&t, imm, true);
			if (!present[k] && used == LIMIT) {
				CHECK(en == NULL);
				continue;
			}
			CHECK(en && en->imm == imm);
			if (!present[k]) {
				CHECK(en->count == 0);
				used++;
				present[k] = true;
			}
			en->count++;
			model[k]++;
		} else {
			struct imm_entry *en = xi_imm_table_get(&t, imm, false);
			CHECK(!!en == present[k]);
			if (en) {
				CHECK(en->count == model[k]);
				xi_imm_table_release(&t, en);
				present[k] = false;
				model[k] = 0;
				used--;
			}
		}
		if (step % 1000 == 0)
			for (uint32_t j = 0; j < KEYS; j++) {
				struct imm_entry *en = xi_imm_table_get(&t, j * 1024u, false);
				CHECK(!!en == present[j]);
				CHECK(!en || en->count == model[j]);
			}
	}
	CHECK(t.used == used);
	xi_imm_table_destroy(&t);
	printf("imm table: ok\n");
	return 0;
}
