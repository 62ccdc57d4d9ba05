"""bench_mla.py's parts (python3 bench/bench_mla.py runs them; see its docstring and bench/README.md):

    env        the run's environment: paths, the log, the GPU platform, torch and ropekv.reference once imported
    shapes     dimensions, the shape sets, the methods of each mode, the bytes each job moves
    cli        the command line
    numerics   fp8 codes without a float8 dtype, code steps, bit comparisons, the fp8_tile row
    timing     CUDA-graph timing, the floors, the --cpu timer
    triton_kernels  the Triton kernels written here (peers and floors), defined on first use
    peers      the peers ropekv is compared with: the unfused PyTorch sequences, torch.compile, Triton, aiter
    library    ropekv's side: its kernels (checked against what was asked) and methods
    write      --mode write: the problem, the fma reference, the checks, the sweep
    v32        --mode v32: DeepSeek-V3.2's fp8_tile writer's problem, reference and checks
    read       --mode read: the read-back op's problem, reference and checks
    jobs       the sweep of --mode v32 and --mode read
    norm       the fused kv_a RMSNorm section (--norm; after the write sweep by default)
    report     the report writer: the .md tables, the .csv, the .png plot
    main       main(): the device, the run's metadata, the mode"""
