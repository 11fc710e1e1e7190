// kernels_host.cpp — runs the CUDA backend's kernels on the host through simt_host.h, one op per
// process, launched as the .cu wrappers launch them (same grids, blocks, plans). Driven by
// tests/test_cuda_kernels.py, whose NumPy references then check the kernels themselves on machines
// without a GPU (cuBLAS, streams and events are the only parts left to the device run).
// stdin: int32 op, int32 n_ints, int64 ints[], int32 n_floats, float64 floats[], int32 n_arrays,
// then each array as int64 nbytes and its bytes. stdout: int32 n_out, each as int64 nbytes + bytes.
#include "simt_host.h"

#include "../attention.cuh"
#include "../matmul.cuh"
#include "../ops.cuh"
#include "../sample.cuh"

typedef std::vector<uint8_t> buf;

static buf read_buf(FILE *f) {
    int64_t n;
    if (fread(&n, 8, 1, f) != 1 || n < 0) exit(2);
    buf b((size_t)n + 64); // slack: 16-byte loads never read past it
    b.resize((size_t)n);
    if (n && fread(b.data(), 1, (size_t)n, f) != (size_t)n) exit(2);
    return b;
}

template <class T>
static T *ptr(buf &b) {
    return b.empty() ? nullptr : (T *)b.data();
}

int main(void) {
    int32_t op, ni, nf, na;
    if (fread(&op, 4, 1, stdin) != 1 || fread(&ni, 4, 1, stdin) != 1) return 2;
    std::vector<int64_t> I(ni);
    if (ni && fread(I.data(), 8, ni, stdin) != (size_t)ni) return 2;
    if (fread(&nf, 4, 1, stdin) != 1) return 2;
    std::vector<double> F(nf);
    if (nf && fread(F.data(), 8, nf, stdin) != (size_t)nf) return 2;
    if (fread(&na, 4, 1, stdin) != 1) return 2;
    std::vector<buf> A;
    for (int i = 0; i < na; i++) A.push_back(read_buf(stdin));
    std::vector<buf> out;
    out.reserve(8); // make_out's references stay valid
    auto make_out = [&](size_t nbytes) -> buf & {
        out.emplace_back(nbytes);
        return out.back();
    };
    switch (op) {
    case 1: { // matvec: [wtype, rows, cols, ntok] [w, x] -> [y]
        const int wtype = (int)I[0], ntok = (int)I[3];
        const int64_t rows = I[1], cols = I[2], rb = llmb_cu_row_bytes(wtype, cols);
        buf &y = make_out((size_t)(ntok * rows) * 4);
        const uint8_t *w = ptr<uint8_t>(A[0]);
        const float *x = ptr<float>(A[1]);
        const bool vec = matvec_vec_ok(wtype, w, cols, x, cols);
        const dim3 grid(llmb_cu_blocks(rows, MV_WARPS)), block(MV_WARPS * 32);
        if (!llmb_cu_dispatch_type(wtype, [&](auto tc) {
                with_matvec_nb(ntok, [&](auto nb) {
                    constexpr int T = decltype(tc)::value, NB = decltype(nb)::value;
                    if (vec) simt::launch(grid, block, 0, matvec_kernel<T, NB, true>, w, rb, rows, cols, x, cols, ntok, ptr<float>(y), rows);
                    else simt::launch(grid, block, 0, matvec_kernel<T, NB, false>, w, rb, rows, cols, x, cols, ntok, ptr<float>(y), rows);
                });
            }))
            return 4;
        break;
    }
    case 2: { // dequantize: [wtype, rows, cols, n, out_f16] [w, ids] -> [out]
        const int wtype = (int)I[0];
        const int64_t rows = I[1], cols = I[2], n = I[3], rb = llmb_cu_row_bytes(wtype, cols);
        buf &o = make_out((size_t)(n * cols) * (I[4] ? 2 : 4));
        const int32_t *ids = ptr<int32_t>(A[1]);
        llmb_cu_dispatch_type(wtype, [&](auto tc) {
            constexpr int T = decltype(tc)::value;
            if (I[4]) simt::launch(dim3((unsigned)n), dim3(128), 0, dequant_kernel<T, __half>, ptr<uint8_t>(A[0]), rb, rows, cols, ids, n, ptr<__half>(o));
            else simt::launch(dim3((unsigned)n), dim3(128), 0, dequant_kernel<T, float>, ptr<uint8_t>(A[0]), rb, rows, cols, ids, n, ptr<float>(o));
        });
        break;
    }
    case 3: { // rmsnorm: [n, n_rows] (eps) [x, residual, w] -> [out, x]
        const int64_t n = I[0];
        const int rows = (int)I[1];
        buf &o = make_out((size_t)(n * rows) * 4);
        simt::launch(dim3(rows), dim3(NORM_THREADS), 0, rmsnorm_kernel, ptr<float>(o), ptr<float>(A[0]), (const float *)ptr<float>(A[1]),
                     (const float *)ptr<float>(A[2]), n, (float)F[0]);
        out.push_back(A[0]);
        break;
    }
    case 4: { // rope: [n_tok, n_heads, hd, neox] (base, scale) [v, pos, ff] -> [v]
        const int n_tok = (int)I[0], nh = (int)I[1], hd = (int)I[2];
        const int64_t n = (int64_t)n_tok * nh * (hd / 2);
        simt::launch(dim3(llmb_cu_blocks(n, 256)), dim3(256), 0, rope_kernel, ptr<float>(A[0]), n_tok, nh, hd, (int64_t)nh * hd,
                     (const int32_t *)ptr<int32_t>(A[1]), (float)F[0], (float)F[1], (const float *)ptr<float>(A[2]), (int)I[3]);
        out.push_back(A[0]);
        break;
    }
    case 5:
    case 6: { // swiglu / add: [] [y, x] -> [y]
        const int64_t n = (int64_t)A[0].size() / 4;
        if (op == 5) simt::launch(dim3(llmb_cu_blocks(n, 256)), dim3(256), 0, swiglu_kernel, ptr<float>(A[0]), (const float *)ptr<float>(A[1]), n);
        else simt::launch(dim3(llmb_cu_blocks(n, 256)), dim3(256), 0, add_kernel, ptr<float>(A[0]), (const float *)ptr<float>(A[1]), n);
        out.push_back(A[0]);
        break;
    }
    case 7: { // kv_store: [kv_type, n_tok, kv_dim] [kc, vc, k, v, slots] -> [kc, vc]
        const int kv_type = (int)I[0], n_tok = (int)I[1], kv_dim = (int)I[2];
        const int64_t rb = kv_row_bytes(kv_type, kv_dim);
        auto run = [&](auto kernel) {
            simt::launch(dim3(n_tok), dim3(128), 0, kernel, ptr<uint8_t>(A[0]), ptr<uint8_t>(A[1]), (const float *)ptr<float>(A[2]),
                         (const float *)ptr<float>(A[3]), (int64_t)kv_dim, kv_dim, (const int32_t *)ptr<int32_t>(A[4]), rb);
        };
        if (kv_type == LLMB_TYPE_F32) run(kv_store_kernel<LLMB_TYPE_F32>);
        else if (kv_type == LLMB_TYPE_F16) run(kv_store_kernel<LLMB_TYPE_F16>);
        else run(kv_store_kernel<LLMB_TYPE_Q8_0>);
        out.push_back(A[0]);
        out.push_back(A[1]);
        break;
    }
    case 8:
    case 9: { // attention: [kv_type, block_size, n_head, n_head_kv, hd, max_blocks, n_seq, split | max_q_len,
              //             max_seq_len] (scale) [q, kc, vc, bt, seq_lens | q_start, q_len, pos0] -> [out]
        llmb_cuda_attn a = {};
        a.kv_type = (int)I[0], a.block_size = (int)I[1], a.n_head = (int)I[2], a.n_head_kv = (int)I[3];
        a.head_dim = (int)I[4], a.max_blocks = (int)I[5], a.n_seq = (int)I[6], a.scale = (float)F[0];
        const int64_t qd = (int64_t)a.n_head * a.head_dim, n_q = (int64_t)A[0].size() / 4 / qd;
        buf &o = make_out((size_t)(n_q * qd) * 4);
        a.q = ptr<float>(A[0]), a.out = ptr<float>(o), a.ldq = qd, a.ldo = qd;
        a.k_cache = ptr<uint8_t>(A[1]), a.v_cache = ptr<uint8_t>(A[2]), a.block_tables = ptr<int32_t>(A[3]);
        const int64_t rb = kv_row_bytes(a.kv_type, a.n_head_kv * a.head_dim);
        auto by_kv = [&](auto dec, auto pf) {
            if (a.kv_type == LLMB_TYPE_F32) return op == 8 ? dec(std::integral_constant<int, LLMB_TYPE_F32>{}) : pf(std::integral_constant<int, LLMB_TYPE_F32>{});
            if (a.kv_type == LLMB_TYPE_F16) return op == 8 ? dec(std::integral_constant<int, LLMB_TYPE_F16>{}) : pf(std::integral_constant<int, LLMB_TYPE_F16>{});
            return op == 8 ? dec(std::integral_constant<int, LLMB_TYPE_Q8_0>{}) : pf(std::integral_constant<int, LLMB_TYPE_Q8_0>{});
        };
        std::vector<float> part;
        auto dec = [&](auto kv) {
            a.seq_lens = ptr<int32_t>(A[4]);
            a.split_keys = (int)I[7];
            a.max_seq_len = (int)I[8];
            dec_args p;
            p.a = a;
            p.rb = rb;
            dec_plan(&a, &p.split, &p.n_split);
            part.assign((size_t)a.n_seq * a.n_head * p.n_split * (a.head_dim + 2), std::nanf(""));
            p.part = p.n_split > 1 ? part.data() : nullptr;
            simt::launch(dim3(a.n_head, a.n_seq, p.n_split), dim3(DEC_THREADS), dec_smem(a.head_dim, p.split),
                         attn_decode_kernel<decltype(kv)::value>, p);
            if (p.n_split > 1) simt::launch(dim3(a.n_head, a.n_seq), dim3(128), 0, attn_combine_kernel, p);
        };
        auto pf = [&](auto kv) {
            a.q_start = ptr<int32_t>(A[4]), a.q_len = ptr<int32_t>(A[5]), a.pos0 = ptr<int32_t>(A[6]);
            a.max_q_len = (int)I[7];
            simt::launch(dim3((a.max_q_len + PF_BQ - 1) / PF_BQ, a.n_seq, a.n_head), dim3(PF_THREADS), pf_smem(a.head_dim),
                         attn_prefill_kernel<decltype(kv)::value>, a, rb);
        };
        by_kv(dec, pf);
        break;
    }
    case 10: { // sample: [n_rows, vocab, want_lp] [logits, params] -> [ids, lps]
        const int rows = (int)I[0], vocab = (int)I[1];
        buf &ids = make_out((size_t)rows * 4);
        buf &lps = make_out((size_t)rows * 4);
        simt::launch(dim3(rows), dim3(SAMPLE_THREADS), 0, sample_kernel, (const float *)ptr<float>(A[0]), vocab,
                     (const llmb_cuda_sampling *)ptr<llmb_cuda_sampling>(A[1]), ptr<int32_t>(ids),
                     I[2] ? ptr<float>(lps) : (float *)nullptr);
        break;
    }
    default:
        return 5;
    }
    const int32_t n_out = (int32_t)out.size();
    fwrite(&n_out, 4, 1, stdout);
    for (auto &b : out) {
        const int64_t n = (int64_t)b.size();
        fwrite(&n, 8, 1, stdout);
        fwrite(b.data(), 1, b.size(), stdout);
    }
    return 0;
}
