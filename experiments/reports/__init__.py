"""The page builders of experiments.report, one module per kind of page:

- lm_tables: the language-model paper tables (ReportSpec, REPORTS; build)
- inan: Inan et al.'s Tables 1 and 2, all sizes and corpora, and their Figure 2 (build_inan)
- nmt: the NMT Table 8 analogue (NMT_REPORTS; build_nmt)
- softmax_study: softmax approximations, tied and untied (SOFTMAX_STUDIES; build_softmax_study)
- tpu_memory: TPU memory per chip (build_tpu_memory)

and what they share: records (importing and reading run records, a cell of several seeds) and pages (the
study page between its markers).
"""
