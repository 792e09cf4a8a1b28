"""Structure of the held-out real-world corpora (tests/data/realworld_heldout/,
tests/data/realworld_heldout3/, tests/data/realworld_heldout4/, tests/data/realworld_heldout5/,
tests/data/realworld_heldout6/, tests/data/realworld_heldout7/, tests/data/realworld_heldout8/,
tests/data/realworld_heldout9/, tests/data/realworld_heldout10/, tests/data/realworld_heldout11/,
tests/data/realworld_heldout12/, tests/data/realworld_heldout13/,
tests/data/realworld_heldout14/, tests/data/realworld_heldout15/,
tests/data/realworld_heldout16/, tests/data/realworld_heldout17/,
tests/data/realworld_heldout18/, tests/data/realworld_heldout19/,
tests/data/realworld_heldout20/, tests/data/realworld_heldout21/,
tests/data/realworld_heldout22/, tests/data/realworld_heldout23/,
tests/data/realworld_heldout24/, tests/data/realworld_heldout25/,
tests/data/realworld_heldout26/, tests/data/realworld_heldout27/,
tests/data/realworld_heldout28/, tests/data/realworld_heldout29/,
tests/data/realworld_heldout30/, tests/data/realworld_heldout31/,
tests/data/realworld_heldout32/, tests/data/realworld_heldout33/,
tests/data/realworld_heldout34/, tests/data/realworld_heldout35/,
tests/data/realworld_heldout36/, tests/data/realworld_heldout37/,
tests/data/realworld_heldout38/, tests/data/realworld_heldout39/,
tests/data/realworld_heldout40/, tests/data/realworld_heldout41/,
tests/data/realworld_heldout42/, tests/data/realworld_heldout43/,
tests/data/realworld_heldout44/, tests/data/realworld_heldout45/,
tests/data/realworld_heldout46/, tests/data/realworld_heldout47/,
tests/data/realworld_heldout48/, tests/data/realworld_heldout49/,
tests/data/realworld_heldout50/, tests/data/realworld_heldout51/,
tests/data/realworld_heldout52/, tests/data/realworld_heldout53/,
tests/data/realworld_heldout54/, tests/data/realworld_heldout55/,
tests/data/realworld_heldout56/, tests/data/realworld_heldout57/,
tests/data/realworld_heldout58/, tests/data/realworld_heldout59/,
tests/data/realworld_heldout60/, tests/data/realworld_heldout61/,
tests/data/realworld_heldout62/, tests/data/realworld_heldout63/,
tests/data/realworld_heldout64/, tests/data/realworld_heldout65/,
tests/data/realworld_heldout66/, tests/data/realworld_heldout67/,
tests/data/realworld_heldout68/, tests/data/realworld_heldout69/,
tests/data/realworld_heldout70/, tests/data/realworld_heldout71/,
tests/data/realworld_heldout72/, tests/data/realworld_heldout76/,
tests/data/realworld_heldout77/, tests/data/realworld_heldout78/,
tests/data/realworld_heldout79/, tests/data/realworld_heldout80/,
tests/data/realworld_heldout81/, tests/data/realworld_heldout82/,
tests/data/realworld_heldout83/, tests/data/realworld_heldout84/,
tests/data/realworld_heldout85/, tests/data/realworld_heldout86/,
tests/data/realworld_heldout87/ and tests/data/realworld_heldout88/).

Each held-out corpus is a set of real log excerpts collected by a route the earlier corpora did
not use, and labelled from each source's own diagnosis before any classifier saw it (see each
README). They exist to give an honest, untuned accuracy figure, so these tests check only their
structure and their independence from the corpora before them. They deliberately do not run the
classifier: the figure is measured once per round (scripts/corpus_accuracy.py, aggregates only),
and no rule may be tuned against these cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from heldout_corpus import (
    DATA,
    FIELDS,
    LOG_CATEGORIES,
    MAX_LINES,
    NVRM_XID,
    consecutive_pairs,
    labels,
    norm_source,
    normalised,
)

from trainguard.taxonomy import Action

DEV = DATA / "realworld"


@dataclass(frozen=True)
class Corpus:
    path: Path
    min_cases: int
    """The collection's size when it was frozen (see its README); never lower it."""
    min_lines: int
    earlier: tuple[Path, ...]
    min_categories: int
    """Distinct log categories it covers (the whole log taxonomy for the second corpus; the
    third's README lists which are thin)."""


HELDOUT4_CASES = 33
HELDOUT4_CATEGORIES = 10
"""The fourth corpus (forums, Q&A, vendor and HPC-centre pages rather than GitHub threads): its
size and category coverage when it was frozen (see its README)."""

HELDOUT5_CASES = 39
HELDOUT5_CATEGORIES = 13
"""The fifth corpus (operator-side symptoms in infrastructure issue threads: kernel/Xid lines,
fabric and IB state, scheduler and storage errors): its size and category coverage when it was
frozen (see its README)."""

HELDOUT6_CASES = 20
HELDOUT6_CATEGORIES = 10
"""The sixth corpus (resolution-first: issue threads found by the fix or conclusion they state,
not by the error or the symptom): its size and category coverage when it was frozen (see its
README)."""

HELDOUT7_CASES = 10
HELDOUT7_CATEGORIES = 5
"""The seventh corpus (hardware and fabric first, from non-framework and ops-tool repositories and
Chinese-language threads): its size and category coverage when it was frozen (see its README)."""

HELDOUT8_CASES = 16
HELDOUT8_CATEGORIES = 8
"""The eighth corpus (the launch and orchestration layer: torchrun/elastic, Ray, KubeRay, Kubeflow,
SkyPilot, Lightning, accelerate, DeepSpeed launcher, Horovod and Slurm launchers, led by how the job
ended): its size and category coverage when it was frozen (see its README)."""

HELDOUT9_CASES = 11
HELDOUT9_CATEGORIES = 8
"""The ninth corpus (issue threads of large-scale pretraining codebases: Megatron-LM, NeMo,
torchtitan, OLMo, GPT-NeoX, Levanter and its home project Marin, and the like, led by checkpoint,
GPU-hardware, ECC, NVLink and NaN failures): its size and category coverage when it was frozen
(see its README)."""

HELDOUT10_CASES = 5
HELDOUT10_CATEGORIES = 5
"""The tenth corpus (RL / RLHF post-training frameworks whose jobs run a trainer with rollout
engines: verl, OpenRLHF, TRL, NeMo-RL, EasyR1, open-r1 and similar, led by how the run ended): its
size and category coverage when it was frozen (see its README). It was built in parallel with the
ninth corpus (pretraining codebases); the two are checked against each other since the merge."""

HELDOUT11_CASES = 6
HELDOUT11_CATEGORIES = 2
"""The eleventh corpus (issue threads of the PyTorch distributed stack itself: c10d /
ProcessGroupNCCL, FSDP, DTensor, distributed checkpoint, torchrun / elastic, and the PyTorch-org
libraries torchtune and pytorch/xla, led by how the run ended): its size and category coverage
when it was frozen (see its README)."""

HELDOUT12_CASES = 5
HELDOUT12_CATEGORIES = 1
"""The twelfth corpus (the Hugging Face and DeepSpeed fine-tuning ecosystem: accelerate,
transformers Trainer, PEFT, DeepSpeed, axolotl, alignment-handbook, Liger-Kernel, streaming,
multi-GPU and multi-node runs only, led by how the run ended): its size and category coverage when
it was frozen (see its README). It was built in parallel with the eleventh corpus (pytorch/pytorch
and PyTorch-org repositories); the two are checked against each other since the merge."""

HELDOUT13_CASES = 17
HELDOUT13_CATEGORIES = 7
"""The thirteenth corpus (issue threads of training codebases outside large-language-model
training: computer vision, speech and audio, diffusion and generative image/video training, and
recommendation / graph training, led by how the run ended): its size and category coverage when
it was frozen (see its README)."""
HELDOUT14_CASES = 9
HELDOUT14_CATEGORIES = 5
"""The fourteenth corpus (issue threads of non-PyTorch training stacks and of the GPU kernel and
library layer under training: JAX / Flax / Orbax, TensorFlow / Keras distribution, PaddleNLP and
PaddleDetection, MindSpore, MXNet, OneFlow, Flux, TransformerEngine, flash-attention, xformers,
bitsandbytes, Triton, CuPy, DALI, led by how the run ended): its size and category coverage when it
was frozen (see its README). It was built in parallel with the thirteenth corpus (vision, speech
and diffusion PyTorch codebases), which was not in this branch."""

HELDOUT15_CASES = 5
HELDOUT15_CATEGORIES = 4
"""The fifteenth corpus (issue threads of managed training platforms and experiment / cluster
managers, searched across SageMaker and its containers, Azure ML, Vertex AI and Google Cloud ML,
determined-ai, ClearML, Polyaxon, Volcano, Kueue and the NVIDIA device-plugin, container-toolkit
and launcher repositories, led by how the job ended): its size and category coverage when it was
frozen (see its README). It was built in parallel with the sixteenth corpus, which was not in
this branch."""
HELDOUT16_CASES = 8
HELDOUT16_CATEGORIES = 5
"""The sixteenth corpus (issue threads of scientific-ML and non-LLM reinforcement-learning training
codebases: protein and molecular models, interatomic potentials, weather and PDE models, Isaac
Lab / Isaac Gym robot learning and other RL libraries, led by how the run ended): its size and
category coverage when it was frozen (see its README). It was built in parallel with a fifteenth
corpus (managed training platforms), which was not in this branch."""
HELDOUT17_CASES = 2
HELDOUT17_CATEGORIES = 2
"""The seventeenth corpus (Q&A and forum threads and HPC-centre knowledge-base pages found through
the stored-pages search, not GitHub issues, led by how the job ended): its size and category
coverage when it was frozen (see its README). It was built in parallel with an eighteenth corpus
(issue threads of inference and serving engines), which was not in this branch."""

HELDOUT18_CASES = 6
HELDOUT18_CATEGORIES = 3
"""The eighteenth corpus (issue threads of multi-GPU inference / serving engines and RLHF rollout
servers other than vLLM: SGLang, TensorRT-LLM and its Triton backend, text-generation-inference,
LMDeploy, llama.cpp CUDA multi-GPU, Mooncake and similar, led by how the process ended): its size
and category coverage when it was frozen (see its README). It was built in parallel with a
seventeenth corpus (Q&A forums), which was not in this branch."""

HELDOUT19_CASES = 4
HELDOUT19_CATEGORIES = 3
"""The nineteenth corpus (issue threads of the AMD GPU training stack: RCCL, ROCm / HIP and the
amdgpu driver, ROCm TransformerEngine and the ROCm Megatron-LM images, restricted to MI100 / MI250
/ MI250X / MI300X multi-GPU and multi-node training runs, led by how the run ended): its size and
category coverage when it was frozen (see its README). It was one of four corpora built in parallel
(heldout19-22), each by its own helper in its own branch; the independence test checks each against
the ones before it in this order."""

HELDOUT20_CASES = 5
HELDOUT20_CATEGORIES = 3
"""The twentieth corpus (issue threads of expert-parallel (MoE) communication libraries and the GPU
communication / RDMA layer under them other than NCCL itself: DeepEP, NVSHMEM, UCCL-EP, ByteDance
Triton-distributed and similar, led by how the run ended): its size and category coverage when it
was frozen (see its README). It was one of four corpora built in parallel (heldout19-22), each by
its own helper in its own branch; the independence test checks each against the ones before it in
this order."""

HELDOUT21_CASES = 7
HELDOUT21_CATEGORIES = 4
"""The twenty-first corpus (issue threads of GPU data-science, gradient-boosting and recommender
training outside the deep-learning frameworks' own repositories: XGBoost GPU / Dask, CatBoost GPU,
dask-cuda and the RAPIDS stack, cuML, led by how the run ended): its size and category coverage
when it was frozen (see its README). It was one of four corpora built in parallel (heldout19-22),
each by its own helper in its own branch; the independence test checks each against the ones before
it in this order."""

HELDOUT22_CASES = 6
HELDOUT22_CATEGORIES = 4
"""The twenty-second corpus (issue threads of rented and hosted GPU platforms and their images:
Google Colab, Kaggle's images, Azure AKS GPU node images, and the RunPod, Modal, vast.ai, Lambda,
Replicate cog, Together, GKE and EKS GPU repositories searched alongside, led by how the run
ended): its size and category coverage when it was frozen (see its README). It was one of four
corpora built in parallel (heldout19-22), each by its own helper in its own branch; the
independence test checks each against the ones before it in this order."""

HELDOUT23_CASES = 5
HELDOUT23_CATEGORIES = 3
"""The twenty-third corpus (issue threads of general-purpose trainer libraries and classic
language-model training codebases: PyTorch Lightning, fairscale, metaseq and nanoGPT kept, with
gpt-neox, composer, fairseq, Megatron-DeepSpeed, llm.c, OLMo and the like searched alongside, led
by how the run ended): its size and category coverage when it was frozen (see its README). It was
one of three corpora built in parallel (heldout23-25), each by its own helper in its own branch;
the independence test checks each against the ones before it in this order."""

HELDOUT24_CASES = 10
HELDOUT24_CATEGORIES = 3
"""The twenty-fourth corpus (issue threads of speech and audio training toolkits: ESPnet,
SpeechBrain, TTS / voice-conversion trainers such as StyleTTS and TensorFlowTTS, VoiceLoop and
Magenta's music transcription, led by how the run ended): its size and category coverage when it
was frozen (see its README). It was one of three corpora built in parallel (heldout23-25), each by
its own helper in its own branch; the independence test checks each against the ones before it in
this order."""

HELDOUT25_CASES = 9
HELDOUT25_CATEGORIES = 6
"""The twenty-fifth corpus (issue threads of medical-imaging and other domain-specific training
frameworks: MONAI, its tutorials, model zoo, MONAI Label and research-contributions (UNETR / Swin
UNETR), nnU-Net issue numbers no earlier corpus used, with TotalSegmentator, MedSAM / SAM
fine-tuning, pathology (CLAM), earth-observation (torchgeo, terratorch / Prithvi), driving (UniAD)
and document-AI repositories searched alongside, led by how the run ended): its size and category
coverage when it was frozen (see its README). It was one of three corpora built in parallel
(heldout23-25), each by its own helper in its own branch; the independence test checks each against
the ones before it in this order."""

HELDOUT26_CASES = 9
HELDOUT26_CATEGORIES = 4
"""The twenty-sixth corpus (issue threads of biology and chemistry foundation-model codebases:
protein structure and protein language models and molecular / materials ML trained or run on
GPUs, such as OpenFold, BioNeMo ESM2, FastFold, Uni-Fold, Boltz, ColabFold, AlphaFold, TorchMD-Net
and MACE, led by how the run ended): its size and category coverage when it was frozen (see its
README)."""
HELDOUT27_CASES = 3
HELDOUT27_CATEGORIES = 3
"""The twenty-seventh corpus (issue and pull-request threads of weather, climate, earth-system and
physics-ML training codebases: ecmwf/anemoi-core, NeuralHydrology and Climate2Weather kept, with
physicsnemo / modulus, makani, FourCastNet, earth2studio, GraphCast, Aurora, ClimaX, ACE,
WeatherGenerator, neuraloperator, DeepXDE, PDEBench and similar searched alongside, led by how the
run ended): its size and category coverage when it was frozen (see its README). It was built in
parallel with another corpus by another helper in another branch; the independence test checks it
against the corpora before it that are in this branch."""
HELDOUT28_CASES = 3
HELDOUT28_CATEGORIES = 3
"""The twenty-eighth corpus (issue threads of vision-language and multimodal model training
codebases: 2U1/Qwen-VL-Series-Finetune and facebookresearch/chameleon kept, with InternVL,
Qwen-VL, MiniCPM-V, CogVLM / CogVLM2 / CogVideo, LLaVA-NeXT, Video-LLaVA, MoE-LLaVA, LAVIS,
open_clip, open_flamingo and similar searched alongside, led by how the run ended): its size and
category coverage when it was frozen (see its README). It was built in parallel with other corpora,
each by its own helper in its own branch; corpora numbered 26 and 27 were not in its branch, so the
independence test checks it only against the ones listed before it here."""
HELDOUT29_CASES = 2
HELDOUT29_CATEGORIES = 1
"""The twenty-ninth corpus (issue threads of ML job orchestration platforms and batch schedulers
that run other people's GPU training jobs: the Kubeflow MPI Operator and OpenPAI kept, with
determined, volcano, kueue, jobset, flyte, metaflow, polyaxon, ClearML, ZenML, Azure ML, Vertex AI,
SageMaker HyperPod, KAI-Scheduler, the Slurm operator and Flux searched alongside, led by how the
job ended): its size and category coverage when it was frozen (see its README). It was built in its
own branch in parallel with other helpers' corpora (heldout26-28), which were not in this branch;
the independence test checks it against the corpora before it in this order."""
HELDOUT30_CASES = 2
HELDOUT30_CATEGORIES = 2
"""The thirtieth corpus (issue threads of LLM pre-training frameworks run on multi-GPU machines and
clusters: GPT-NeoX, OLMo / OLMo-core, nanotron, MaxText GPU runs, both Megatron-DeepSpeed forks,
fairseq, InternEvo, Composer and litgpt, led by how the run ended; the ninth corpus had searched
most of the same repositories, and only two litgpt threads had a reachable log and conclusion): its
size and category coverage when it was frozen (see its README). It was built in parallel with
another corpus in another branch; the twenty-sixth to twenty-ninth corpora were not in this
branch."""
HELDOUT31_CASES = 4
HELDOUT31_CATEGORIES = 4
"""The thirty-first corpus (issue threads of RLHF and post-training frameworks other than verl, TRL,
NeMo-RL, EasyR1 and open-r1: trlx, ROLL, OpenRLHF and verifiers kept, with DeepSpeed-Chat,
NeMo-Aligner, AReaL, open-instruct, PRIME-RL, OpenRLHF-based forks, rllm and TinyZero searched
alongside, led by how the run ended): its size and category coverage when it was frozen (see its
README). Its route overlaps the tenth corpus's repositories, though not its sources; corpora 26 to
30 were not in this branch."""
HELDOUT32_CASES = 5
HELDOUT32_CATEGORIES = 4
"""The thirty-second corpus (issue threads of video and image generation training / fine-tuning
codebases: DiffSynth-Studio, finetrainers, musubi-tuner, diffusion-pipe and ai-toolkit kept, with
FastVideo, HunyuanVideo, Wan2.1, CogVideo, LTX-Video, Sana, AnimateDiff and the like searched
alongside, led by how the run ended): its size and category coverage when it was frozen (see its
README). It was built in parallel with other corpora, each by its own helper in its own branch;
the independence test checks each against the ones before it in this order."""
HELDOUT33_CASES = 4
HELDOUT33_CATEGORIES = 2
"""The thirty-third corpus (issue threads of GPU kernel and low-level training libraries that
training jobs call into: xFormers, DeepSpeed op builds, Apex and an Unsloth loop fixed in
unsloth-zoo kept, with TransformerEngine, flash-attention, Triton, bitsandbytes, CUTLASS, torchao
and Liger-Kernel searched alongside, led by how the run ended): its size and category coverage
when it was frozen (see its README). It was built in parallel with other corpora, each by its own
helper in its own branch; the independence test checks each against the ones before it in this
order."""
HELDOUT34_CASES = 6
HELDOUT34_CATEGORIES = 4
"""The thirty-fourth corpus (issue threads of GPU cluster infrastructure software that operators
run under training jobs: nvidia-docker, pyxis, the Kubernetes device plugin and DCGM kept, with
enroot, deepops, dcgm-exporter, nvidia-container-toolkit, aws-ofi-nccl, azhpc-images,
network-operator, container-engine-accelerators, the SHARP plugin and CoreWeave repositories
searched alongside, led by how the node or job ended): its size and category coverage when it was
frozen (see its README). It was built in parallel with other corpora in other branches; the
thirty-third was not in this branch, and the independence test checks each against the ones
before it in this order."""
HELDOUT35_CASES = 4
HELDOUT35_CATEGORIES = 3
"""The thirty-fifth corpus (non-English technical write-ups and Q&A about failed GPU training runs:
a Korean tistory post, a Chinese article page and two GitHub threads concluded in Chinese, found by
the error text plus words of the language in Japanese, Korean, Russian, German / Spanish /
Portuguese and Chinese sources other than CSDN and GitCode): its size and category coverage when it
was frozen (see its README). It was built in parallel with other corpora, each by its own helper in
its own branch; corpora numbered 33 and 34 were not in its branch, so the independence test checks
it only against the ones listed before it here."""
HELDOUT39_CASES = 11
HELDOUT39_CATEGORIES = 4
"""The thirty-ninth corpus (issue threads of 3D perception / autonomous-driving training codebases,
neural-rendering trainers and federated-learning frameworks: spconv, OpenPCDet, both BEVFusion
codebases, instant-ngp, nerfstudio, 3D Gaussian Splatting, Flower and NVFlare kept, with BEVFormer,
BEVDet, BEVDepth, second.pytorch, pytorch3d, FedML and PySyft searched alongside, led by how the
run ended): its size and category coverage when it was frozen (see its README). It was built in
parallel with other corpora, each by its own helper in its own branch; corpora numbered 36 to 38
were not in its branch, so the independence test checks it only against the ones listed before it
here."""

HELDOUT36_CASES = 6
HELDOUT36_CATEGORIES = 4
"""The thirty-sixth corpus (issue threads of TensorFlow and Keras multi-GPU / multi-worker training:
tf.distribute MirroredStrategy, MultiWorkerMirroredStrategy and parameter-server training in
tensorflow/tensorflow, and Keras 3 ModelParallel sharding in keras-team/keras-hub, with
keras-team/keras, keras-cv, tensorflow/models, tensor2tensor, tensorflow/ecosystem and
NVIDIA/DeepLearningExamples searched alongside, led by how the run ended; the fourteenth corpus had
searched part of this route and kept no case from it): its size and category coverage when it was
frozen (see its README). It was built in parallel with other corpora, each by its own helper in its
own branch; the independence test checks it against the ones listed before it here."""
HELDOUT37_CASES = 3
HELDOUT37_CATEGORIES = 2
"""The thirty-seventh corpus (issue threads of recommender-system and embedding-heavy GPU training:
FBGEMM's fbgemm_gpu, TorchRec and Transformers4Rec kept, with HugeCTR, NVTabular, Merlin, DLRM,
TFRA, DeepRec, x-deeplearning, monolith, PaddleRec and PERSIA searched alongside, led by how the
run ended): its size and category coverage when it was frozen (see its README). It was built in
parallel with other corpora in other branches; a thirty-sixth was not in its branch, so the
independence test checks it only against the ones listed before it here."""
HELDOUT38_CASES = 5
HELDOUT38_CATEGORIES = 4
"""The thirty-eighth corpus (issue threads of GPU reinforcement-learning frameworks for agents,
games and simulators, not LLM RLHF: the Stable-Baselines3 RL Zoo, legged_gym for rsl_rl, MuJoCo MJX
with Brax, EnvPool and rl_games kept, with sample-factory, cleanrl, stable-baselines3, tianshou,
acme, torchbeast, IsaacGymEnvs, TorchRL, openai/baselines, MineDojo and habitat-lab searched
alongside, led by how the run ended): its size and category coverage when it was frozen (see its
README). It was built in parallel with other corpora, each by its own helper in its own branch;
corpora numbered 36 and 37 were not in its branch, so the independence test checks it only against
the ones listed before it here."""
HELDOUT41_CASES = 6
HELDOUT41_CATEGORIES = 3
"""The forty-first corpus (issue threads of the checkpointing, dataset-streaming and
storage-connector libraries that training jobs run on: WebDataset, MosaicML Streaming, Orbax,
TensorStore and LitData kept, with FFCV, the S3 connector for PyTorch, gcsfs, s3fs, gcsfuse,
JuiceFS, Alluxio and AIStore searched alongside, led by how the run ended): its size and category
coverage when it was frozen (see its README). It was built in parallel with other corpora, each by
its own helper in its own branch; a fortieth corpus was not in its branch, so the independence
test checks it only against the ones listed before it here."""

HELDOUT40_CASES = 6
HELDOUT40_CATEGORIES = 3
"""The fortieth corpus (issue threads of alternative distributed-training frameworks outside the
PyTorch, Hugging Face, DeepSpeed, Megatron / NeMo, ColossalAI, Horovod and OneFlow families:
BytePS, hivemind and the hivemind-based RL Swarm, and Petals kept, with BaguaSys/bagua, Alpa,
Tutel, MegaBlocks, Mesh TensorFlow, torchgpipe, Varuna and bytedance/ps-lite searched alongside, led
by how the run ended): its size and category coverage when it was frozen (see its README). It was
built in parallel with other corpora, each by its own helper in its own branch; the independence
test checks it only against the ones listed before it here."""

HELDOUT42_CASES = 3
HELDOUT42_CATEGORIES = 2
"""The forty-second corpus (issue threads of batch schedulers and ML experiment / elastic-training
platforms that run distributed training jobs: DLRover and ElasticDL kept, with Determined,
Polyaxon, ClearML, MLflow, Volcano, Kueue, JobSet, LeaderWorkerSet, KAI-Scheduler, run:ai, NNI and
HTCondor / CHTC searched alongside, led by how the job ended; the eighth, fifteenth and
twenty-ninth corpora had searched most of the listed platforms before): its size and category
coverage when it was frozen (see its README). It was built in parallel with other corpora, each by
its own helper in its own branch; corpora numbered 40 and 41 were not in its branch, so the
independence test checks it only against the ones listed before it here."""

HELDOUT43_CASES = 4
HELDOUT43_CATEGORIES = 3
"""The forty-third corpus (issue and pull-request threads of robot-learning, imitation-learning and
vision-language-action training codebases: OpenVLA-OFT, robomimic and LeRobot kept, with openvla,
openpi, octo, diffusion_policy, ManiSkill, Isaac-GR00T and open_x_embodiment searched alongside, led
by how the run ended): its size and category coverage when it was frozen (see its README). It was
built in parallel with other corpora, each by its own helper in its own branch; corpora numbered 40
to 42 were not in its branch, so the independence test checks it only against the ones listed
before it here."""

HELDOUT44_CASES = 4
HELDOUT44_CATEGORIES = 2
"""The forty-fourth corpus (issue threads of small, from-scratch or research LLM pre-training
codebases: llm.c, modded-nanogpt, OLMo and lingua kept, with OLMo-core, gpt-neox, open_lm,
nanotron, picotron, TinyLlama, Zyphra, axlearn and MaxText GPU runs searched alongside, led by how
the run ended): its size and category coverage when it was frozen (see its README). It was built
in parallel with other corpora, each by its own helper in its own branch; corpora numbered 40 to
43 were not in its branch, so the independence test checks it only against the ones listed before
it here."""

HELDOUT45_CASES = 4
HELDOUT45_CATEGORIES = 3
"""The forty-fifth corpus (issue threads of time-series forecasting and tabular deep-learning
libraries: Time-Series-Library, pytorch-forecasting and Darts kept, with GluonTS, NeuralForecast,
Chronos, TimesFM, AutoGluon, TabPFN and N-BEATS searched alongside, led by how the run ended): its
size and category coverage when it was frozen (see its README). It was built in parallel with other
corpora, each by its own helper in its own branch; corpora not in its branch could not be checked,
so the independence test checks it only against the ones listed before it here."""
HELDOUT46_CASES = 5
HELDOUT46_CATEGORIES = 3
"""The forty-sixth corpus (issue threads of contrastive, embedding and retrieval model training
codebases: open_clip, FlagEmbedding and BLIP kept, with sentence-transformers, gritlm, contrastors,
LAVIS and VLM2Vec searched alongside, led by how the run ended): its size and category
coverage when it was frozen (see its README). It was built in parallel with other corpora, each by
its own helper in its own branch; the corpus numbered 45 was not in its branch, so the independence
test checks it only against the ones listed before it here."""
HELDOUT47_CASES = 8
HELDOUT47_CATEGORIES = 5
"""The forty-seventh corpus (issue and pull-request threads of audio, music and voice generation
model trainers: so-vits-svc, fish-speech, AudioLDM fine-tuning, VITS2, an EnCodec trainer, Mozilla
and Coqui TTS kept, with audiocraft, GPT-SoVITS, RVC, bark, VITS, OpenVoice, VoiceCraft, tango,
descript-audio-codec and audiolm-pytorch searched alongside, led by how the run ended; the
twenty-fourth corpus had searched several of these repositories before without taking a case from
them): its size and category coverage when it was frozen (see its README). It was built in
parallel with other corpora, each by its own helper in its own branch; corpora numbered 45 and 46
were not in its branch, so the independence test checks it only against the ones listed before it
here."""
HELDOUT48_CASES = 2
HELDOUT48_CATEGORIES = 2
"""The forty-eighth corpus (issue threads of self-supervised and foundation vision model
pre-training codebases: DINOv2 and the MAE-derived FastConvMAE kept, with DINO, MAE, MoCo v3,
I-JEPA, VISSL, Lightly, SAM 2 training, ConvNeXt, Swin Transformer / SimMIM, timm, big_vision and
EVA searched alongside, led by how the run ended): its size and category coverage when it was
frozen (see its README). It was built in parallel with other corpora, each by its own helper in its
own branch; corpora numbered 45 to 47 were not in its branch, so the independence test checks it
only against the ones listed before it here."""
HELDOUT52_CASES = 7
HELDOUT52_CATEGORIES = 2
"""The fifty-second corpus (issue threads of federated, decentralized and privacy-preserving
training frameworks: Flower, NVFlare, Opacus, APPFL, FLUTE and PySyft kept, with FedML, OpenFL,
FATE / FATE-LLM, FederatedScope, prime-diloco, hivemind, Petals and rl-swarm searched alongside,
led by how the run ended): its size and category coverage when it was frozen (see its README). It
was built in parallel with other corpora, each by its own helper in its own branch; corpora
numbered 49 to 51 were not in its branch, so the independence test checks it only against the ones
listed before it here."""

HELDOUT49_CASES = 7
HELDOUT49_CATEGORIES = 5
"""The forty-ninth corpus (issue and pull-request threads of model compression, quantization and
distillation pipelines run on GPU machines: AutoAWQ, AutoGPTQ, GPTQModel, Intel Neural Compressor
and Qualcomm AIMET kept, with llm-compressor, NVIDIA Model-Optimizer, NNCF, Brevitas, torchao QAT,
optimum-quanto, HQQ and knowledge-distillation trainers searched alongside, led by how the
calibration, QAT or distillation run ended): its size and category coverage when it was frozen (see
its README). It was built in parallel with other corpora, each by its own helper in its own branch;
corpora not in its branch could not be checked, so the independence test checks it only against
the ones listed before it here."""
HELDOUT50_CASES = 4
HELDOUT50_CATEGORIES = 3
"""The fiftieth corpus (issue threads of alternative-architecture and long-context research
training codebases: the RWKV LoRA trainer Blealtan/RWKV-LM-LoRA, OpenNLPLab/lightning-attention,
HazyResearch/safari and state-spaces/mamba kept, with BlinkDL/RWKV-LM, RWKV-Runner, RWKV-PEFT,
flash-linear-attention, ring-flash-attention, EasyContext, long-context-attention, xlstm,
torchscale, LongLoRA, YaRN and hgru2-pytorch searched alongside, led by how the run ended): its
size and category coverage when it was frozen (see its README). It was built in parallel with
other corpora, each by its own helper in its own branch; a corpus numbered 49 was not in its
branch, so the independence test checks it only against the ones listed before it here."""
HELDOUT51_CASES = 7
HELDOUT51_CATEGORIES = 2
"""The fifty-first corpus (issue threads of graph-learning training stacks run on GPUs: PyTorch
Geometric and its pytorch_scatter library, OGB and GraphLearn-for-PyTorch kept, with DGL
(GraphBolt, DistDGL), DGL-KE, PyTorch-BigGraph, GraphStorm, quiver, gnnlab, deep_gcns_torch and
knowledge-graph-embedding trainers (RotatE, PyKEEN, LibKGE) searched alongside, led by how the run
ended): its size and category coverage when it was frozen (see its README). It was built in
parallel with other corpora, each by its own helper in its own branch; corpora numbered 49 and 50
were not in its branch, so the independence test checks it only against the ones listed before it
here."""

HELDOUT53_CASES = 7
HELDOUT53_CATEGORIES = 4
"""The fifty-third corpus (issue threads of teaching, course and book codebases whose users train
on GPUs: the fast.ai library, course-v3 and course Docker images and the Natural Language
Processing with Transformers book notebooks kept, with fastbook, forums.fast.ai, d2l-en / d2l-zh,
labml's annotated paper implementations, Lightning tutorials, the Full Stack Deep Learning labs,
the Hugging Face course, minGPT, nn-zero-to-hero, llm.c multi-GPU runs and other book repositories
searched alongside, led by how the run ended): its size and category coverage when it was frozen
(see its README). It was built in parallel with other corpora, each by its own helper in its own
branch; corpora not in its branch could not be checked, so the independence test checks it only
against the ones listed before it here."""
HELDOUT54_CASES = 5
HELDOUT54_CATEGORIES = 3
"""The fifty-fourth corpus (issue threads of benchmark suites and vendor / framework reference
training implementations: pytorch/examples, the MLPerf training reference mlcommons/training,
NVIDIA's MLPerf submission in mlcommons/training_results_v2.1 and the AlgoPerf benchmark
mlcommons/algorithmic-efficiency kept, with NVIDIA/DeepLearningExamples, other MLPerf training
submissions, pytorch/benchmark, tensorflow/models, the huggingface/transformers example scripts and
NVIDIA/apex searched alongside, led by how the run ended): its size and category coverage when it
was frozen (see its README). It was built in parallel with other corpora, each by its own helper in
its own branch; a corpus numbered 53 was not in its branch, so the independence test checks it only
against the ones listed before it here."""
HELDOUT55_CASES = 5
HELDOUT55_CATEGORIES = 3
"""The fifty-fifth corpus (issue and pull-request threads of compiled training: torch.compile
(Dynamo / Inductor / AOTAutograd), CUDA graphs and the training codebases whose runs broke when
compilation was turned on (SD-Trainer, SimpleTuner, LLMs-from-scratch, Megatron-LM's optimizer CUDA
graphs), with pytorch/pytorch pt2 threads, Lightning-AI/lightning-thunder, pytorch/xla on GPU and
compiled DDP/FSDP searched alongside, led by how the run ended): its size and category coverage
when it was frozen (see its README). It was built in parallel with other corpora, each by its own
helper in its own branch; corpora numbered 53 and 54 were not in its branch, so the independence
test checks it only against the ones listed before it here."""
HELDOUT56_CASES = 3
HELDOUT56_CATEGORIES = 3
"""The fifty-sixth corpus (issue threads of GPU training jobs run inside container runtimes on HPC
and cloud hosts: NVIDIA/enroot with pyxis, NVIDIA-NeMo containers launched through pyxis/enroot,
and a Docker GPU container through the NVIDIA container toolkit kept, with apptainer/apptainer,
apptainer/singularity and sylabs/singularity, NVIDIA/pyxis, hpc/charliecloud, Podman with CDI,
NERSC podman-hpc, Sarus / Shifter, NVIDIA/nvidia-container-toolkit and libnvidia-container and NGC
container threads searched alongside, led by how the run ended): its size and category coverage
when it was frozen (see its README). It was built in parallel with other corpora, each by its own
helper in its own branch; corpora numbered 53 to 55 were not in its branch, so the independence
test checks it only against the ones listed before it here."""
HELDOUT57_CASES = 8
HELDOUT57_CATEGORIES = 4
"""The fifty-seventh corpus (issue threads of optimizer-research and memory-efficient training
repositories: GaLore (jiaweizzhao/GaLore), BAdam (Ledzy/BAdam), Muon (KellerJordan/Muon) and LOMO
(OpenLMLab/LOMO) kept, with Q-GaLore, AdaLomo / CoLLiE, Adam-mini, Sophia, schedule_free, APOLLO,
LISA / LMFlow, SOAP, Dion, HeavyBall, lion-pytorch and pytorch_optimizer searched alongside, led by
how the run ended): its size and category coverage when it was frozen (see its README). It was
built in parallel with other corpora, each by its own helper in its own branch; corpora not in its
branch could not be checked, so the independence test checks it only against the ones listed
before it here."""
HELDOUT58_CASES = 10
HELDOUT58_CATEGORIES = 6
"""The fifty-eighth corpus (issue and pull-request threads of hyperparameter-search and AutoML tools
that drive training trials and of trainers' built-in search: Optuna and optuna-examples, an
Optuna-driven trainer (jax-unirep), the Hugging Face Trainer's hyperparameter_search, SMAC3,
Auto-PyTorch, KerasTuner, AutoKeras and ivadomed's automate_training sweep kept, with nni, W&B
sweeps, syne-tune, Ax, FLAML, Ludwig hyperopt, allennlp-optuna and setfit / sentence-transformers
searched alongside, led by how the trial or study ended): its size and category coverage when it
was frozen (see its README). It was built in parallel with other corpora, each by its own helper in
its own branch; a corpus numbered 57 was not in its branch, so the independence test checks it only
against the ones listed before it here."""

HELDOUT59_CASES = 7
HELDOUT59_CATEGORIES = 4
"""The fifty-ninth corpus (issue threads of GPU training run from notebook environments: Jupyter /
JupyterLab kernels, Kaggle notebooks, a Kubeflow Jupyter notebook pod and a Databricks notebook kept
(huggingface/accelerate's notebook_launcher, scDiffEq, kubeflow/kubeflow, databrickslabs/dolly,
DogBreed_gluon, GRAINet, RF-DETR's ddp_notebook), with VS Code notebooks, JupyterHub
batchspawner / kubespawner, SageMaker Studio, Colab and Lightning's ddp_notebook searched
alongside, led by how the run ended): its size and category coverage when it was frozen (see its
README). It was built in parallel with other corpora, each by its own helper in its own branch;
corpora numbered 57 and 58 were not in its branch, so the independence test checks it only against
the ones listed before it here."""

HELDOUT60_CASES = 6
HELDOUT60_CATEGORIES = 4
"""The sixtieth corpus (issue and pull-request threads of the data-preparation and data-loading
steps of GPU training jobs: Hugging Face datasets caches on multi-node jobs (InternLM/xtuner,
huggingface/datasets), NeMo Curator GPU deduplication, Megatron-Bridge packed-sequence
preparation on NFS, Megatron preprocess_data.py (bigcode-project/Megatron-LM) and NeMo's merged
indexed datasets kept, with datatrove, dolma, Megatron-LM and gpt-neox indexed datasets, nanotron,
litData and mosaicml/streaming streaming tokenization and dataset sharding searched alongside, led
by how the step ended): its size and category coverage when it was frozen (see its README). It was
built in parallel with other corpora, each by its own helper in its own branch; corpora numbered
57 to 59 were not in its branch, so the independence test checks it only against the ones listed
before it here."""

HELDOUT61_CASES = 6
HELDOUT61_CATEGORIES = 4
"""The sixty-first corpus (issue threads of speech and audio model training outside the toolkits
that earlier corpora took cases from: Kaldi nnet3 chain training, WeNet, fairseq wav2vec 2.0
pretraining, wav2letter, a k2-based Matcha-TTS recipe and the Descript audio codec trainer kept,
with FunASR, Whisper fine-tuning repositories, lhotse, NVIDIA tacotron2 / waveglow, F5-TTS,
s3prl, deepspeech.pytorch and others searched alongside, led by how the run ended): its size and
category coverage when it was frozen (see its README). Speech and audio training was already the
twenty-fourth corpus's main route and part of the thirteenth's and forty-seventh's, so this one
avoided every repository any earlier corpus took a case from. It was built in parallel with other
corpora, each by its own helper in its own branch; it is checked only against the ones listed
before it here."""
HELDOUT62_CASES = 8
HELDOUT62_CATEGORIES = 6
"""The sixty-second corpus (issue threads of computer-vision detection and segmentation trainers
that no earlier corpus searched: YOLOX, the Caffe2 Detectron, Mesh R-CNN, IDEA-Research's
DINO, YOLACT, the GDRNPP YOLOX detector and MedSAM kept, with DETR-family, YOLOv6, MaskFormer,
EfficientDet, SAM fine-tuning and semantic-segmentation trainers searched alongside; the OpenMMLab,
detectron2, Ultralytics and PaddleDetection sub-routes of earlier corpora avoided; led by how the
run ended): its size and category coverage when it was frozen (see its README). It was built in
parallel with other corpora, each by its own helper in its own branch; a corpus numbered 61 was
not in its branch, so the independence test checks it only against the ones listed before it
here."""
HELDOUT63_CASES = 6
HELDOUT63_CATEGORIES = 2
"""The sixty-third corpus (issue and pull-request threads of recommendation-system and
large-embedding training: NVIDIA-Merlin/HierarchicalKV's GPU hash table under TFRA, the NVTabular
data loader under Horovod, alibaba/x-deeplearning's parameter-server trainer, PARAM's distributed
DLRM benchmark and the facebookresearch/dlrm reference kept, with HugeCTR / SOK, Merlin models and
dataloader, recsys-examples, TFRA, tensorflow/recommenders, DLRM and NCF in DeepLearningExamples
and mlcommons/training, TorchEasyRec, RecIS, DeepRec, PaddleRec, RecBole and HLLM searched
alongside, led by how the run ended): its size and category coverage when it was frozen (see its
README). The thirty-seventh corpus had already made this stack its main route, so this one took
nothing from the three repositories that corpus kept cases from (pytorch/FBGEMM,
meta-pytorch/torchrec, NVIDIA-Merlin/Transformers4Rec) and reused none of its rejected threads. It
was built in parallel with other corpora, each by its own helper in its own branch; corpora
numbered 61 and 62 were not in its branch, so the independence test checks it only against the
ones listed before it here."""
HELDOUT64_CASES = 4
HELDOUT64_CATEGORIES = 2
"""The sixty-fourth corpus (issue threads of scientific-ML training codebases other than protein
folding: microsoft/mattergen materials diffusion training, OpenSTL spatio-temporal / weather
forecasting training and ALIGNN materials-property training kept, with physicsnemo / modulus /
modulus-launch, makani, FourCastNet, ClimaX, fairchem, nequip / allegro, SevenNet, CHGNet, matgl,
schnetpack, metatrain, Graphormer, scGPT, DeepXDE, neuraloperator, CDVAE, skillful_nowcasting and
graphnet searched alongside, and the repositories of earlier corpora (deepmd-kit, mace,
torchmd-net, anemoi, neuralhydrology, Climate2Weather) avoided, led by how the run ended): its size
and category coverage when it was frozen (see its README). It was built in parallel with other
corpora, each by its own helper in its own branch; corpora numbered 61 to 63 were not in its
branch, so the independence test checks it only against the ones listed before it here."""
HELDOUT66_CASES = 4
HELDOUT66_CATEGORIES = 2
"""The sixty-sixth corpus (issue and pull-request threads of GPU reinforcement-learning and
robot-simulation trainers outside the repositories and rejected threads of the sixteenth,
thirty-eighth and forty-third corpora: an Isaac Gym task (isaac-sim/IsaacGymEnvs), the
AlphaZero-style combopt-zero trainer, FastTD3 on MuJoCo Playground humanoid tasks and Unity
ML-Agents kept, with RLlib, Isaac Lab, ManiSkill, RLinf, MJX / Brax, CleanRL, sheeprl,
DreamerV3, Habitat, legged-robot Isaac Gym forks, ProtoMotions and mjlab searched alongside, led
by how the run ended): its size and category coverage when it was frozen (see its README). It
was built in parallel with other corpora, each by its own helper in its own branch; a corpus
numbered 65 was not in its branch, so the independence test checks it only against the ones
listed before it here."""

HELDOUT65_CASES = 12
HELDOUT65_CATEGORIES = 5
"""The sixty-fifth corpus (issue and pull-request threads of the HPC communication layers under GPU
jobs: Open MPI, UCX and UCC, MPICH over UCX, NVSHMEM, CUDA-aware MPI through mpi4py / mpi4jax /
conda-forge Open MPI, PMIx under srun and Horovod's MPI transport, led by how the layer failed: CUDA
IPC, IB verbs and HCA limits, PMIx launch, shared memory, host and GPU OOM under mpirun): its size
and category coverage when it was frozen (see its README). It was built in parallel with other
corpora, each by its own helper in its own branch; those were not in its branch, so the
independence test checks it only against the ones listed before it here."""
HELDOUT67_CASES = 6
HELDOUT67_CATEGORIES = 2
"""The sixty-seventh corpus (issue threads of GPU array and kernel libraries used inside training
pipelines: rapidsai/dask-cuda, the cuDF tracker, cupy/cupy, NVIDIA/warp, taichi-dev/taichi and
JAX's GPU backend kept, with numba's CUDA target, cuML, cuGraph, RMM, UCX-Py and RAFT searched
alongside, led by how the run ended): its size and category coverage when it was frozen (see its
README). It was built in parallel with other corpora, each by its own helper in its own branch;
corpora numbered 65 and 66 were not in its branch, so the independence test checks it only against
the ones listed before it here."""

HELDOUT68_CASES = 5
HELDOUT68_CATEGORIES = 2
"""The sixty-eighth corpus (issue and pull-request threads of the training-data and checkpoint I/O
layers of GPU training jobs: Hugging Face datasets streaming over fsspec / HTTP, Hub streaming in
the awsome-distributed-ai FSDP example, h5py annotation files read by DDP ranks (MTTR), timm
checkpoints on a shared multi-node filesystem and MosaicML Streaming's local shard cache kept,
with WebDataset, torchdata, NVIDIA DALI, FFCV, Petastorm, orbax / tensorstore,
torch.distributed.checkpoint, s3fs / gcsfs / gcsfuse and parallel filesystems searched alongside,
led by how the run ended): its size and category coverage when it was frozen (see its README). The
forty-first corpus had already made checkpointing and dataset-streaming libraries its main route,
so no thread that corpus (or the sixtieth) kept or rejected was reused. It was built in parallel
with other corpora, each by its own helper in its own branch; corpora numbered 65 to 67 were not
in its branch, so the independence test checks it only against the ones listed before it here."""

HELDOUT69_CASES = 8
HELDOUT69_CATEGORIES = 5
"""The sixty-ninth corpus (issue and pull-request threads of local GPU LLM and speech inference
engines outside PyTorch: whisper.cpp and a whisper.cpp desktop app, stable-diffusion.cpp's ggml
CUDA backend, llama.cpp's quantize and model loader, KoboldCpp and MLC-LLM kept, with exllama /
exllamav2, tinygrad, text-generation-webui and llama.cpp forks searched alongside, led by how the
process ended): its size and category coverage when it was frozen (see its README). It was built
in parallel with other corpora, each by its own helper in its own branch; those were not in its
branch, so the independence test checks it only against the ones listed before it here."""
HELDOUT70_CASES = 11
HELDOUT70_CATEGORIES = 4
"""The seventieth corpus (issue and pull-request threads of GPU inference runtimes and compilers
outside the PyTorch training stack: NVIDIA/TensorRT, ONNX Runtime's CUDA execution provider
(microsoft/onnxruntime and an application built on it), Triton Inference Server
(triton-inference-server/server) and apache/tvm kept, with ONNX Runtime's TensorRT execution
provider, Triton's onnxruntime / python / tensorrt backends and Torch-TensorRT searched alongside,
led by how the run ended): its size and category coverage when it was frozen (see its README). The
eighteenth corpus had already searched TensorRT-LLM and the Triton TensorRT-LLM backend, so no
thread from those two repositories was used. It was built in parallel with other corpora, each by
its own helper in its own branch; a corpus numbered 69 was not in its branch, so the independence
test checks it only against the ones listed before it here."""
HELDOUT71_CASES = 4
HELDOUT71_CATEGORIES = 3
"""The seventy-first corpus (GPU jobs on HPC centres' shared infrastructure: HPC container runtimes
with GPUs (NVIDIA/enroot, NVIDIA/pyxis, Singularity through a site wrapper) and HPC-site support
trackers (jade-hpc-gpu, ai4d-iasc/trixie) kept, with parallel file systems (BeeGFS, GPFS, Lustre,
WekaFS, NFS), Apptainer, Charliecloud, Podman with CDI and HPC-centre documentation pages searched
alongside, led by how the job ended): its size and category coverage when it was frozen (see its
README). It was built in parallel with other corpora, each by its own helper in its own branch;
corpora numbered 69 and 70 were not in its branch, so the independence test checks it only against
the ones listed before it here."""
HELDOUT72_CASES = 4
HELDOUT72_CATEGORIES = 3
"""The seventy-second corpus (issue threads of fine-tuning recipe repositories and smaller training
libraries on NVIDIA GPUs: modelscope/ms-swift and hiyouga/LlamaFactory kept, with torchtune, H2O
LLM Studio, Oumi, XTuner and other mmengine-based trainers, numba's CUDA target and MLflow / W&B
instrumented multi-GPU runs searched alongside, and axolotl, verl, OpenRLHF, DeepSpeed core and
Megatron core avoided, led by how the run ended): its size and category coverage when it was
frozen (see its README). It was built in parallel with other corpora, each by its own helper in its
own branch; corpora numbered 69 to 71 were not in its branch, so the independence test checks it
only against the ones listed before it here."""
HELDOUT76_CASES = 5
HELDOUT76_CATEGORIES = 3
"""The seventy-sixth corpus (GPU jobs on Google Cloud and Azure GPU nodes: a cluster-toolkit A3 High
TCPX Slurm cluster, an AKS ND H100 v5 node pool, Azure ML compute clusters and an Azure NC A100 v4
VM kept, with GKE GPU node pools and their driver installer, ai-on-gke, the GCS FUSE CSI driver,
AKS, azhpc-images, azurehpc-health-checks, Azure ML examples and CycleCloud searched alongside,
led by how the job or node ended): its size and category coverage when it was frozen (see its
README). It was built in parallel with three other routes (Q&A sites, NVIDIA's developer forums,
the frameworks' forums), each by its own helper in its own branch; none of those found a case
whose log and conclusion were both in the stored text, so numbers 73 to 75 are unused."""
HELDOUT77_CASES = 8
HELDOUT77_CATEGORIES = 4
"""The seventy-seventh corpus (GPU failures in scientific simulation codes on GPUs and GPU clusters:
LAMMPS with the KOKKOS package, OpenMM, ImpactX on Perlmutter, SPECFEM3D and CP2K under Slurm kept,
with GROMACS, AMBER pmemd.cuda, NAMD, HOOMD-blue, Quantum ESPRESSO, PIConGPU, WarpX and cluster
support trackers searched alongside, led by hardware, ECC, Xid, node, memory, MPI and file-system
failures): its size and category coverage when it was frozen (see its README). It was built in
parallel with other corpora, each by its own helper in its own branch, so the independence test
checks it only against the ones listed before it here."""
HELDOUT78_CASES = 9
HELDOUT78_CATEGORIES = 3
"""The seventy-eighth corpus (issue threads of long-running GPU compute outside machine learning:
cryptocurrency miners with CUDA backends (ethminer, T-Rex, NBMiner, NiceHash's Excavator, eqm and
QuickMiner kept, with xmrig / xmrig-cuda, xmr-stak, lolMiner, GMiner, qubic and others searched
alongside) and GPU password crackers (hashcat kept, John the Ripper searched), with Folding@home,
OpenMM and BOINC searched but not kept, led by GPU hardware, Xid, PCIe riser, overclock and driver
failures before memory and software errors): its size and category coverage when it was frozen
(see its README). It was built in parallel with other corpora, each by its own helper in its own
branch; number 77 was not in its branch, so the independence test checks it only against the ones
listed before it here."""
HELDOUT79_CASES = 9
HELDOUT79_CATEGORIES = 5
"""The seventy-ninth corpus (issue threads of GPU rendering, video and media pipelines on NVIDIA
GPUs: a Blender Cycles GPU render, FFmpeg NVENC / CUDA builds and their users (GyanD's FFmpeg
builds, Livepeer, Jellyfin in a Proxmox LXC, Tdarr plugins), a Real-ESRGAN upscaler, video2x, Isaac
Sim's RTX renderer and a CUDA path tracer kept, with DeepStream, GStreamer nvcodec, OBS, NVENC
patches, Vulkan upscalers and BlenderProc searched alongside, led by GPU hardware, Xid, memory and
driver / CUDA version failures): its size and category coverage when it was frozen (see its
README). It was built in parallel with other corpora, each by its own helper in its own branch;
corpora numbered 73 to 75, 77 and 78 were not in its branch, so the independence test checks it
only against the ones listed before it here."""

HELDOUT80_CASES = 5
HELDOUT80_CATEGORIES = 3
"""The eightieth corpus (issue threads of Python GPU programming below the big frameworks: numba's
CUDA target, a custom PyTorch CUDA extension (torchmcubes), a research library on its own CUDA
kernels (NKSR) and nvidia-smi / NVML on a shared GPU workstation kept, with cuda-python, PyCUDA,
pynvml and NVML-based monitors, cuML, cuGraph, RAFT, RMM, dask-cuda, PyTorch3D, Kaolin, Apex,
DCGM, dcgm-exporter and gpu-burn searched alongside, led by hardware, ECC, Xid, out-of-memory,
driver / toolkit mismatch and NCCL failures, then user errors): its size and category coverage
when it was frozen (see its README). It was built in parallel with other corpora, each by its own
helper in its own branch; corpora numbered 73 to 75 and 77 to 79 were not in its branch, so the
independence test checks it only against the ones listed before it here."""

HELDOUT81_CASES = 5
HELDOUT81_CATEGORIES = 3
"""The eighty-first corpus (issue threads of GPU jobs in computational biology: AlphaFold, ColabFold
and LocalColabFold structure prediction, cryoSPARC and RELION cryo-EM processing kept, with
OpenFold, RoseTTAFold / RFdiffusion, ProteinMPNN, ESM / ESMFold, Boltz, Chai-1, CryoDRGN and NVIDIA
Parabricks / Clara pipelines searched alongside, led by GPU hardware, Xid, ECC, out-of-memory (GPU
and host), storage and network failures, then software and user errors): its size and category
coverage when it was frozen (see its README). It was built in parallel with other corpora, each by
its own helper in its own branch; corpora numbered 73 to 75 and any built alongside it were not
in its branch, so the independence test checks it only against the ones listed before it here."""
HELDOUT82_CASES = 11
HELDOUT82_CATEGORIES = 3
"""The eighty-second corpus (issue threads about NVIDIA Jetson and other embedded Tegra GPUs:
dusty-nv/jetson-inference, NVIDIA-AI-IOT/trt_pose, OE4T/meta-tegra and ML projects' threads from
Jetson Nano, TX2, Xavier and Orin boards (TensorRT demos, OpenDataCam, libSGM, ollama, a Jetson
Nano Ubuntu image) kept, with jetson-containers, jetson-utils, torch2trt, jetbot, DeepStream apps
and tegra-demo-distro searched alongside, led by GPU hardware, shared host / GPU memory, power and
thermal, SD-card / eMMC storage and driver / CUDA / JetPack-version failures, then user and
configuration errors): its size and category coverage when it was frozen (see its README). It was
built in parallel with other corpora, each by its own helper in its own branch; corpora numbered
73 to 75 and 81 were not in its branch, so the independence test checks it only against the ones
listed before it here."""
HELDOUT83_CASES = 4
HELDOUT83_CATEGORIES = 2
"""The eighty-third corpus (issue threads of GPU jobs on GPU clouds other than AWS, Google Cloud
and Azure: a Vast.ai rental, the dstack launcher on its Cudo backend, a RunPod pod template and an
HPC-AI cloud H200 VM kept, with Oracle Cloud (oci-hpc), CoreWeave, Lambda, Paperspace, Modal,
Nebius, Crusoe and SkyPilot threads about these clouds searched alongside, led by GPU hardware,
Xid, ECC, node, InfiniBand / RoCE, NCCL-timeout and storage failures, then software and user
errors): its size and category coverage when it was frozen (see its README). It was built in
parallel with other corpora, each by its own helper in its own branch; corpora numbered 73 to 75,
81 and 82 were not in its branch, so the independence test checks it only against the ones listed
before it here."""
HELDOUT84_CASES = 5
HELDOUT84_CATEGORIES = 3
"""The eighty-fourth corpus (issue threads of distributed GPU training in deep-learning frameworks
other than PyTorch, TensorFlow and JAX: PaddlePaddle fleet / ParallelExecutor multi-GPU and
multi-node runs, MegEngine multi-GPU training and Caffe / NVCaffe multi-GPU NCCL training (one via
DIGITS) kept, with PaddleDetection, PaddleOCR, PaddleNLP, PaddleSeg, PaddleYOLO, MindSpore on GPU,
OneFlow / LiBai, Apache MXNet and GluonCV, ChainerMN, CNTK, DGL and PyG multi-GPU runs searched
alongside, led by NCCL errors and hangs, GPU hardware, out-of-memory, node and storage failures,
then software and user errors): its size and category coverage when it was frozen (see its
README). It was built in parallel with other corpora, each by its own helper in its own branch;
corpora numbered 73 to 75 and 81 to 83 were not in its branch, so the independence test checks it
only against the ones listed before it here."""
HELDOUT85_CASES = 1
HELDOUT85_CATEGORIES = 1
"""The eighty-fifth corpus (GitHub issue and pull-request threads from any repository whose
description was written in 2024, about a GPU job failing: a multi-node vLLM deployment over Ray
whose NCCL init failed on a bad node kept, with Xid, ECC, NCCL / InfiniBand, host and GPU
out-of-memory, checkpoint, storage and illegal-memory-access threads of that year searched
alongside, led by how the job ended, then software and user errors): its size and category
coverage when it was frozen (see its README). It was built in parallel with other corpora, each by
its own helper in its own branch; corpora numbered 73 to 75 and 86 to 88 were not in its branch,
so the independence test checks it only against the ones listed before it here."""
HELDOUT86_CASES = 2
HELDOUT86_CATEGORIES = 2
"""The eighty-sixth corpus (GitHub issue and pull-request threads from any repository whose
description was written between 2025-01-01 and 2025-08-31, found by date with version words of that
period: an RTX 5090 / sm_120 PyTorch build mismatch in an RL training run and a torchtitan
container whose 16 MB /dev/shm broke NCCL on 8x H100 kept, with NCCL timeouts and hangs, Xid / ECC,
NET/IB, out-of-memory, killed workers, storage, checkpoint, Slurm, segfault and NaN threads of the
period searched alongside, led by how the job ended, then software and user errors): its size and
category coverage when it was frozen (see its README). It was built in parallel with other corpora,
each by its own helper in its own branch; corpora numbered 85, 87 and 88 were not in its branch, so
the independence test checks it only against the ones listed before it here."""
HELDOUT87_CASES = 2
HELDOUT87_CATEGORIES = 2
"""The eighty-seventh corpus (GitHub issue threads from any repository whose description was
written on or after 2025-09-01, about GPU jobs failing: an NVLink / hardware peer-memory fault on a
multi-GPU H100 inference worker and a CUDA-graph-capture failure in Llama 3.1 405B pretraining on
GB300 kept, with NCCL timeouts and hangs, Xid, ECC, NVLink / NVLS, InfiniBand, host and GPU
out-of-memory, /dev/shm, full-disk, checkpoint, Slurm, illegal-memory-access and environment
threads of the same period searched alongside, led by how the job ended, then software and user
errors): its size and category coverage when it was frozen (see its README). It was built in
parallel with other corpora, each by its own helper in its own branch; corpora numbered 73 to 75,
85, 86 and 88 were not in its branch, so the independence test checks it only against the ones
listed before it here."""
HELDOUT88_CASES = 3
HELDOUT88_CATEGORIES = 3
"""The eighty-eighth corpus (non-GitHub pages written by the people who ran the failed GPU job:
two personal blogs on the author's own sites and one personal blog hosted on GitHub Pages, kept,
with HPC-centre user-support pages, mailing-list archives (slurm-users, Open MPI, NCCL), GPU-cloud
and ML-team engineering blogs and postmortems searched alongside, led by Xid, ECC, NCCL, InfiniBand,
out-of-memory, /dev/shm, storage and checkpoint failures, then software and user errors): its size
and category coverage when it was frozen (see its README). It was built in parallel with other
corpora, each by its own helper in its own branch; corpora numbered 73 to 75 and 85 to 87 were not
in its branch, so the independence test checks it only against the ones listed before it here."""

FROZEN = (
    ("realworld_heldout", 112, 3, len(LOG_CATEGORIES)),
    ("realworld_heldout3", 41, 1, 12),
    ("realworld_heldout4", HELDOUT4_CASES, 1, HELDOUT4_CATEGORIES),
    ("realworld_heldout5", HELDOUT5_CASES, 1, HELDOUT5_CATEGORIES),
    ("realworld_heldout6", HELDOUT6_CASES, 1, HELDOUT6_CATEGORIES),
    ("realworld_heldout7", HELDOUT7_CASES, 1, HELDOUT7_CATEGORIES),
    ("realworld_heldout8", HELDOUT8_CASES, 1, HELDOUT8_CATEGORIES),
    ("realworld_heldout9", HELDOUT9_CASES, 1, HELDOUT9_CATEGORIES),
    ("realworld_heldout10", HELDOUT10_CASES, 1, HELDOUT10_CATEGORIES),
    ("realworld_heldout11", HELDOUT11_CASES, 1, HELDOUT11_CATEGORIES),
    ("realworld_heldout12", HELDOUT12_CASES, 1, HELDOUT12_CATEGORIES),
    ("realworld_heldout13", HELDOUT13_CASES, 1, HELDOUT13_CATEGORIES),
    ("realworld_heldout14", HELDOUT14_CASES, 1, HELDOUT14_CATEGORIES),
    ("realworld_heldout15", HELDOUT15_CASES, 1, HELDOUT15_CATEGORIES),
    ("realworld_heldout16", HELDOUT16_CASES, 1, HELDOUT16_CATEGORIES),
    ("realworld_heldout17", HELDOUT17_CASES, 1, HELDOUT17_CATEGORIES),
    ("realworld_heldout18", HELDOUT18_CASES, 1, HELDOUT18_CATEGORIES),
    ("realworld_heldout19", HELDOUT19_CASES, 1, HELDOUT19_CATEGORIES),
    ("realworld_heldout20", HELDOUT20_CASES, 1, HELDOUT20_CATEGORIES),
    ("realworld_heldout21", HELDOUT21_CASES, 1, HELDOUT21_CATEGORIES),
    ("realworld_heldout22", HELDOUT22_CASES, 1, HELDOUT22_CATEGORIES),
    ("realworld_heldout23", HELDOUT23_CASES, 1, HELDOUT23_CATEGORIES),
    ("realworld_heldout24", HELDOUT24_CASES, 1, HELDOUT24_CATEGORIES),
    ("realworld_heldout25", HELDOUT25_CASES, 1, HELDOUT25_CATEGORIES),
    ("realworld_heldout26", HELDOUT26_CASES, 1, HELDOUT26_CATEGORIES),
    ("realworld_heldout27", HELDOUT27_CASES, 1, HELDOUT27_CATEGORIES),
    ("realworld_heldout28", HELDOUT28_CASES, 1, HELDOUT28_CATEGORIES),
    ("realworld_heldout29", HELDOUT29_CASES, 1, HELDOUT29_CATEGORIES),
    ("realworld_heldout30", HELDOUT30_CASES, 1, HELDOUT30_CATEGORIES),
    ("realworld_heldout31", HELDOUT31_CASES, 1, HELDOUT31_CATEGORIES),
    ("realworld_heldout32", HELDOUT32_CASES, 1, HELDOUT32_CATEGORIES),
    ("realworld_heldout33", HELDOUT33_CASES, 1, HELDOUT33_CATEGORIES),
    ("realworld_heldout34", HELDOUT34_CASES, 1, HELDOUT34_CATEGORIES),
    ("realworld_heldout35", HELDOUT35_CASES, 1, HELDOUT35_CATEGORIES),
    ("realworld_heldout36", HELDOUT36_CASES, 1, HELDOUT36_CATEGORIES),
    ("realworld_heldout37", HELDOUT37_CASES, 1, HELDOUT37_CATEGORIES),
    ("realworld_heldout38", HELDOUT38_CASES, 1, HELDOUT38_CATEGORIES),
    ("realworld_heldout39", HELDOUT39_CASES, 1, HELDOUT39_CATEGORIES),
    ("realworld_heldout40", HELDOUT40_CASES, 1, HELDOUT40_CATEGORIES),
    ("realworld_heldout41", HELDOUT41_CASES, 1, HELDOUT41_CATEGORIES),
    ("realworld_heldout42", HELDOUT42_CASES, 1, HELDOUT42_CATEGORIES),
    ("realworld_heldout43", HELDOUT43_CASES, 1, HELDOUT43_CATEGORIES),
    ("realworld_heldout44", HELDOUT44_CASES, 1, HELDOUT44_CATEGORIES),
    ("realworld_heldout45", HELDOUT45_CASES, 1, HELDOUT45_CATEGORIES),
    ("realworld_heldout46", HELDOUT46_CASES, 1, HELDOUT46_CATEGORIES),
    ("realworld_heldout47", HELDOUT47_CASES, 1, HELDOUT47_CATEGORIES),
    ("realworld_heldout48", HELDOUT48_CASES, 1, HELDOUT48_CATEGORIES),
    ("realworld_heldout49", HELDOUT49_CASES, 1, HELDOUT49_CATEGORIES),
    ("realworld_heldout50", HELDOUT50_CASES, 1, HELDOUT50_CATEGORIES),
    ("realworld_heldout51", HELDOUT51_CASES, 1, HELDOUT51_CATEGORIES),
    ("realworld_heldout52", HELDOUT52_CASES, 1, HELDOUT52_CATEGORIES),
    ("realworld_heldout53", HELDOUT53_CASES, 1, HELDOUT53_CATEGORIES),
    ("realworld_heldout54", HELDOUT54_CASES, 1, HELDOUT54_CATEGORIES),
    ("realworld_heldout55", HELDOUT55_CASES, 1, HELDOUT55_CATEGORIES),
    ("realworld_heldout56", HELDOUT56_CASES, 1, HELDOUT56_CATEGORIES),
    ("realworld_heldout57", HELDOUT57_CASES, 1, HELDOUT57_CATEGORIES),
    ("realworld_heldout58", HELDOUT58_CASES, 1, HELDOUT58_CATEGORIES),
    ("realworld_heldout59", HELDOUT59_CASES, 1, HELDOUT59_CATEGORIES),
    ("realworld_heldout60", HELDOUT60_CASES, 1, HELDOUT60_CATEGORIES),
    ("realworld_heldout61", HELDOUT61_CASES, 1, HELDOUT61_CATEGORIES),
    ("realworld_heldout62", HELDOUT62_CASES, 1, HELDOUT62_CATEGORIES),
    ("realworld_heldout63", HELDOUT63_CASES, 1, HELDOUT63_CATEGORIES),
    ("realworld_heldout64", HELDOUT64_CASES, 1, HELDOUT64_CATEGORIES),
    ("realworld_heldout65", HELDOUT65_CASES, 1, HELDOUT65_CATEGORIES),
    ("realworld_heldout66", HELDOUT66_CASES, 1, HELDOUT66_CATEGORIES),
    ("realworld_heldout67", HELDOUT67_CASES, 1, HELDOUT67_CATEGORIES),
    ("realworld_heldout68", HELDOUT68_CASES, 1, HELDOUT68_CATEGORIES),
    ("realworld_heldout69", HELDOUT69_CASES, 1, HELDOUT69_CATEGORIES),
    ("realworld_heldout70", HELDOUT70_CASES, 1, HELDOUT70_CATEGORIES),
    ("realworld_heldout71", HELDOUT71_CASES, 1, HELDOUT71_CATEGORIES),
    ("realworld_heldout72", HELDOUT72_CASES, 1, HELDOUT72_CATEGORIES),
    ("realworld_heldout76", HELDOUT76_CASES, 1, HELDOUT76_CATEGORIES),
    ("realworld_heldout77", HELDOUT77_CASES, 1, HELDOUT77_CATEGORIES),
    ("realworld_heldout78", HELDOUT78_CASES, 1, HELDOUT78_CATEGORIES),
    ("realworld_heldout79", HELDOUT79_CASES, 1, HELDOUT79_CATEGORIES),
    ("realworld_heldout80", HELDOUT80_CASES, 1, HELDOUT80_CATEGORIES),
    ("realworld_heldout81", HELDOUT81_CASES, 1, HELDOUT81_CATEGORIES),
    ("realworld_heldout82", HELDOUT82_CASES, 1, HELDOUT82_CATEGORIES),
    ("realworld_heldout83", HELDOUT83_CASES, 1, HELDOUT83_CATEGORIES),
    ("realworld_heldout84", HELDOUT84_CASES, 1, HELDOUT84_CATEGORIES),
    ("realworld_heldout85", HELDOUT85_CASES, 1, HELDOUT85_CATEGORIES),
    ("realworld_heldout86", HELDOUT86_CASES, 1, HELDOUT86_CATEGORIES),
    ("realworld_heldout87", HELDOUT87_CASES, 1, HELDOUT87_CATEGORIES),
    ("realworld_heldout88", HELDOUT88_CASES, 1, HELDOUT88_CATEGORIES),
)
"""(directory, cases, lines per case at least, categories) of each held-out corpus, in the order
they were collected: each must share nothing with the development corpus and every one before it."""


def _in_order(frozen: tuple[tuple[str, int, int, int], ...]) -> tuple[Corpus, ...]:
    earlier = [DEV]
    out = []
    for name, cases, lines, categories in frozen:
        out.append(Corpus(DATA / name, cases, lines, tuple(earlier), categories))
        earlier.append(DATA / name)
    return tuple(out)


CORPORA = _in_order(FROZEN)
CASES = [(c, lab) for c in CORPORA for lab in labels(c.path)]


def _case_id(item: object) -> str:
    if isinstance(item, Corpus):
        return item.path.name
    return str(item["file"]) if isinstance(item, dict) else str(item)


@pytest.mark.parametrize("corpus", CORPORA, ids=_case_id)
def test_layout_and_coverage(corpus: Corpus) -> None:
    assert (corpus.path / "README.md").is_file()
    assert (corpus.path / "cases").is_dir()
    labs = labels(corpus.path)
    assert len(labs) >= corpus.min_cases
    used = {str(lab["category"]) for lab in labs}
    assert len(used & LOG_CATEGORIES) >= corpus.min_categories, sorted(used)


@pytest.mark.parametrize(("corpus", "lab"), CASES, ids=_case_id)
def test_label_is_well_formed(corpus: Corpus, lab: dict[str, object]) -> None:
    assert set(lab) == FIELDS
    assert lab["category"] in LOG_CATEGORIES, "held-out cases need a log diagnosis"
    assert lab["action"] in {a.value for a in Action}
    assert lab["action"] != Action.NONE.value
    assert str(lab["source"]).startswith(("https://", "http://"))
    assert str(lab["diagnosis"]).strip()
    assert isinstance(lab["xids"], list)
    assert all(isinstance(x, int) for x in lab["xids"])


@pytest.mark.parametrize(("corpus", "lab"), CASES, ids=_case_id)
def test_case_is_a_short_excerpt_whose_xids_match_its_nvrm_lines(
        corpus: Corpus, lab: dict[str, object]) -> None:
    path = corpus.path / str(lab["file"])
    assert path.is_file(), f"{lab['file']} is labelled but missing"
    text = path.read_text(encoding="utf-8")
    n_lines = len(text.splitlines())
    assert corpus.min_lines <= n_lines <= MAX_LINES, f"{lab['file']}: {n_lines} lines"
    xids = lab["xids"]
    assert isinstance(xids, list)
    assert set(xids) == {int(x) for x in NVRM_XID.findall(text)}


@pytest.mark.parametrize("corpus", CORPORA, ids=_case_id)
def test_every_case_labelled_once_one_case_per_source(corpus: Corpus) -> None:
    labs = labels(corpus.path)
    labelled = [str(lab["file"]) for lab in labs]
    assert len(labelled) == len(set(labelled)), "a case is labelled twice"
    on_disk = sorted(f"cases/{p.name}" for p in (corpus.path / "cases").glob("*.log"))
    assert sorted(labelled) == on_disk
    sources = [norm_source(lab["source"]) for lab in labs]
    assert len(sources) == len(set(sources))


PAIRS = [(c, e) for c in CORPORA for e in c.earlier]


@pytest.mark.parametrize(("corpus", "earlier"), PAIRS,
                         ids=lambda x: x.path.name if isinstance(x, Corpus) else x.name)
def test_nothing_shared_with_an_earlier_corpus(corpus: Corpus, earlier: Path) -> None:
    """No source, no two consecutive non-trivial lines, and no whole excerpt (short ones have
    few line pairs) already in an earlier corpus: the classifier would see the same input."""
    labs = labels(corpus.path)
    shared = sorted({norm_source(lab["source"]) for lab in labs}
                    & {norm_source(lab["source"]) for lab in labels(earlier)})
    assert not shared, f"sources also in {earlier.name}: {shared}"
    seen: dict[tuple[str, str], str] = {}
    texts = {}
    for path in sorted((earlier / "cases").glob("*.log")):
        text = path.read_text(encoding="utf-8")
        texts[path.name] = normalised(text)
        for pair in consecutive_pairs(text):
            seen.setdefault(pair, path.name)
    problems = []
    for lab in labs:
        text = (corpus.path / str(lab["file"])).read_text(encoding="utf-8")
        problems += [f"{lab['file']} ~ {earlier.name}/{seen[pair]}: {pair[0][:60]!r}"
                     for pair in consecutive_pairs(text) if pair in seen]
        problems += [f"{lab['file']} is inside {earlier.name}/{name}"
                     for name, other in texts.items() if normalised(text) in other]
    assert not problems, "\n".join(problems)


def test_overlap_check_detects_copied_lines() -> None:
    copied = "a line that is long enough to count\nanother line long enough to count\n"
    assert consecutive_pairs(copied) == {("a line that is long enough to count",
                                          "another line long enough to count")}
    assert not consecutive_pairs("short\nlines\n...\n")
    assert normalised("  a\n\n b \n") == "a\nb"
