# gradci: the API, the migrations and the workers share one image; compose picks the command.
# ACCELERATOR=cpu (default) installs the CPU builds of torch and jax; ACCELERATOR=cuda12 the CUDA
# builds, for the GPU worker (docker-compose.yml's worker-cuda).
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim

ARG ACCELERATOR=cpu
ARG TORCH_CUDA_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

# git: workers fetch the repositories they check; bubblewrap builds each runner's box (docs/security.md).
RUN apt-get update \
 && apt-get install -y --no-install-recommends git bubblewrap \
 && rm -rf /var/lib/apt/lists/*

RUN set -eux; \
    if [ "$ACCELERATOR" = "cuda12" ]; then \
        pip install --no-cache-dir torch --index-url "$TORCH_CUDA_INDEX"; \
        pip install --no-cache-dir "jax[cuda12]"; \
    else \
        pip install --no-cache-dir torch --index-url "$TORCH_CPU_INDEX"; \
        pip install --no-cache-dir jax; \
    fi

WORKDIR /app
# What the package is made of (.dockerignore lets in only that): gradci/ and the layer folders it links to.
COPY . ./
RUN pip install --no-cache-dir .

# Workers run pull-request code (in their sandboxed runner): never as root.
RUN useradd --create-home --uid 10001 gradci \
 && mkdir -p /var/lib/gradci \
 && chown gradci /var/lib/gradci
USER gradci
ENV GRADCI_WORKDIR=/var/lib/gradci
ENTRYPOINT ["gradci"]
CMD ["up"]
