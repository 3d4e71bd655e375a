"""Small valid input files the CLI tests start from (a pod, an Alibaba openb node and pod list)."""

POD = ("kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
       "    resources: {limits: {nvidia.com/gpu: 1}}\n")
OPENB_NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,G2\nn1,32000,131072,4,G2\n"
OPENB_PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,2000,4096,1,500\np1,3000,4096,0,0\n"
