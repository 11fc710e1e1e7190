// vecdot_simd.c — fills the kernel table of a SIMD level (llmb_vec_dot_kernels, vecdot.h: its table of
// weight type x level x kernel kind says what runs) from the files that hold the kernels; the entries a
// level has no kernel for keep what vecdot.c installed before (the scalar reference, or at the AVX-512
// level the AVX2 kernels).
#include "vecdot_impl.h"

void llmb_vec_dot_simd_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    llmb_vd_x86_install(lvl, t);             // dot + tile of every type (AVX2; 256-bit VNNI)
    llmb_vd_avx512_k_install(lvl, t);        // K-type panels; Q4_K, Q6_K, Q8_0 in groups of 16
    llmb_vd_avx512_float_install(lvl, t);    // F32 / F16 / BF16 panels and one-token rows
    llmb_vd_avx512_decode_install(lvl, t);   // K-type small batches and one-token rows
    llmb_vec_dot_il8_install(lvl, t);        // groups of 8 (legacy types, IQ4_NL, IQ4_XS; K types, Q8_0 at AVX2)
    llmb_vd_amx_install(lvl, t);             // the legacy types' prefill with AMX (after il8: it wraps those)
    llmb_vd_bf16_install(lvl, t);            // BF16 pair products
    llmb_vd_neon_install(lvl, t);
    llmb_vd_tq_install(lvl, t);              // TQ1_0, TQ2_0, MXFP4, NVFP4 (AVX2)
    llmb_vd_iq_install(lvl, t);              // the I-quants IQ1_S .. IQ3_S (AVX2)
}
