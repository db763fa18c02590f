import torch
from bench.qwen3_passes import CONFIG, llm_weights
from engine.families.minicpmo.qwen3 import Qwen3Model, head_rms_norm, rotate_half
from engine.ops.fused import heads_into_cache
D=torch.device("cuda"); heads,kv,d,rows,first=32,8,128,3,700
g=torch.Generator(device=D).manual_seed(0)
qkv=(torch.randn(rows,(heads+2*kv)*d,generator=g,device=D)*2).to(torch.bfloat16)
qn,kn=(1+0.1*torch.randn(2,d,generator=g,device=D)).to(torch.bfloat16)
m=Qwen3Model(dict(CONFIG,num_hidden_layers=1),llm_weights(1,D),D,torch.bfloat16,capacity=1024)
keys,values=(torch.zeros(kv,1024,d,dtype=torch.bfloat16,device=D) for _ in range(2))
pos=torch.tensor([first],device=D)
gq=heads_into_cache(qkv,qn,kn,1e-6,m.cos_table,m.sin_table,pos,keys,values,heads)
cos,sin=m.cos_table[first:first+rows],m.sin_table[first:first+rows]
q=qkv[:, :heads*d].view(rows,heads,d)
n=head_rms_norm(q,qn,1e-6).transpose(0,1)
r=((n*cos)+(rotate_half(n)*sin)).reshape(kv,-1,d)
mis=(gq!=r)
print("mismatch frac", mis.float().mean().item(), "first half", mis[...,:64].float().mean().item(), "second", mis[...,64:].float().mean().item())
# variants: norm only
xf=q.float(); rstd=torch.rsqrt(xf.pow(2).mean(-1,keepdim=True)+1e-6)
a=(xf*rstd).to(torch.bfloat16)
print("diff ulps sample", (gq.float()-r.float()).abs()[mis][:10].tolist(), r.float()[mis][:10].tolist())
# rope with fp32 unrounded products
n2=n.float(); r2=(n2*cos.float()+rotate_half(n2)*sin.float()).to(torch.bfloat16).reshape(kv,-1,d)
print("vs unrounded rope products", (gq!=r2).float().mean().item())
r3=((n2*cos.float()).to(torch.bfloat16).float()+(rotate_half(n2)*sin.float()).to(torch.bfloat16).float()).to(torch.bfloat16).reshape(kv,-1,d)
print("vs explicit rounded", (gq!=r3).float().mean().item(), (r3!=r).float().mean().item())
