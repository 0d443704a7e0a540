// Experiment behind the xnnpack backend's conv_slices (generator/carve/backends/xnnpack.py) and
// docs/performance.md: one XNNPACK 2022 convolution against the same convolution run as S operators over
// slices of the output channels (S = 1, 2, 4, 8, 16; each writes its channels of the same NHWC output),
// best of 7 x 5 runs. XNNPACK sweeps all output channels for every block of 7 output pixels, so weights
// larger than L2 are re-read from L3 / memory per block; slices that fit in L2 are not.
//
//   cc -O2 bench/xnn_conv_split.c -o /tmp/xnn_conv_split -lXNNPACK -lpthreadpool -lcpuinfo -lm
//   /tmp/xnn_conv_split H W CIN COUT K STRIDE THREADS     # e.g. 40 40 256 512 3 2 1 (yolo26s model.7)
//
// Not part of the package or the tests.
#include <xnnpack.h>
#include <pthreadpool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
int main(int argc,char**argv){
  if(argc!=8){fprintf(stderr,"usage: xnn_conv_split H W CIN COUT K STRIDE THREADS\n");return 2;}
  int H=atoi(argv[1]),W=atoi(argv[2]),Ci=atoi(argv[3]),Co=atoi(argv[4]),k=atoi(argv[5]),s=atoi(argv[6]),thr=atoi(argv[7]);
  xnn_initialize(NULL);
  pthreadpool_t pool=thr>1?pthreadpool_create(thr):NULL;
  float*w=calloc((size_t)Co*Ci*k*k,4),*b=calloc(Co,4);
  for(size_t i=0;i<(size_t)Co*Ci*k*k;i++)w[i]=(rand()%100)*1e-3f;
  int p=k/2; int Ho=(H+2*p-k)/s+1,Wo=(W+2*p-k)/s+1;
  float*in=calloc((size_t)H*W*Ci+16,4),*out=calloc((size_t)Ho*Wo*Co,4);
  for (int S = 1; S <= 16; S *= 2) {
    int cs = Co / S; xnn_operator_t op[16];
    for (int j = 0; j < S; j++) {
      xnn_create_convolution2d_nhwc_f32(p,p,p,p,k,k,s,s,1,1,1,Ci,cs,Ci,Co,w+(size_t)j*cs*Ci*k*k,b+j*cs,-1e30f,1e30f,0,&op[j]);
      xnn_setup_convolution2d_nhwc_f32(op[j],1,H,W,in,out+j*cs,pool);
    }
    for(int i=0;i<3;i++) for(int j=0;j<S;j++) xnn_run_operator(op[j],pool);
    double best=1e9;for(int r=0;r<7;r++){double t0=now();for(int i=0;i<5;i++)for(int j=0;j<S;j++)xnn_run_operator(op[j],pool);double t=(now()-t0)/5;if(t<best)best=t;}
    double fl=2.0*Ho*Wo*Co*Ci*k*k;
    printf("%dx%dx%d->%d k%d s%d split %d (weights/slice %.2f MB): %.3f ms %.1f GFLOP/s\n",H,W,Ci,Co,k,s,S,(double)cs*Ci*k*k*4e-6,best,fl/best*1e-6);
    for(int j=0;j<S;j++) xnn_delete_operator(op[j]);
  }
}
