#include "classic_types.hpp"

#include <cstddef>

namespace loom::tools {
namespace {

MPI_Datatype commit(MPI_Datatype t) {
  MPI_Type_commit(&t);
  return t;
}

MPI_Datatype subarray(std::vector<int> sizes, std::vector<int> sub, std::vector<int> starts,
                      MPI_Datatype old) {
  MPI_Datatype t;
  MPI_Type_create_subarray(static_cast<int>(sizes.size()), sizes.data(), sub.data(), starts.data(),
                           MPI_ORDER_C, old, &t);
  return commit(t);
}

struct Particle {
  double pos[3];
  double vel[3];
  int id;
  float mass;
};

}  // namespace

MPI_Datatype make_2d(int rows, int block) {
  MPI_Datatype t;
  MPI_Type_vector(rows, block, 2 * block, MPI_BYTE, &t);
  return commit(t);
}

MPI_Datatype make_3d_box(int nz, int ny, int nx, int NZ, int NY, int NX) {
  return subarray({NZ, NY, NX}, {nz, ny, nx}, {0, 0, 0}, MPI_BYTE);
}

MPI_Datatype make_deep_struct() {
  // struct { int; vector(4 x hvector(3 x indexed{...} of float)) ; double }
  MPI_Datatype idx, hv, vec, st;
  int bl[3] = {1, 2, 1}, dp[3] = {0, 2, 5};
  MPI_Type_indexed(3, bl, dp, MPI_FLOAT, &idx);
  MPI_Type_create_hvector(3, 1, 32, idx, &hv);
  MPI_Type_vector(4, 1, 2, hv, &vec);
  int sbl[3] = {1, 1, 1};
  MPI_Aint sdp[3] = {0, 16, 1024};
  MPI_Datatype sty[3] = {MPI_INT, vec, MPI_DOUBLE};
  MPI_Type_create_struct(3, sbl, sdp, sty, &st);
  MPI_Type_free(&idx);
  MPI_Type_free(&hv);
  MPI_Type_free(&vec);
  return commit(st);
}

std::vector<ClassicType> classic_types() {
  std::vector<ClassicType> v;
  v.push_back({"contiguous 64 KiB of double", "contiguous",
               [] {
                 MPI_Datatype t;
                 MPI_Type_contiguous(8192, MPI_DOUBLE, &t);
                 return commit(t);
               },
               64});
  v.push_back({"matrix column (vector 1024 x 1 float, stride 1024)", "2d",
               [] {
                 MPI_Datatype t;
                 MPI_Type_vector(1024, 1, 1024, MPI_FLOAT, &t);
                 return commit(t);
               },
               16});
  v.push_back({"2D sub-block as vector (512 x 64 double, stride 256)", "2d",
               [] {
                 MPI_Datatype t;
                 MPI_Type_vector(512, 64, 256, MPI_DOUBLE, &t);
                 return commit(t);
               },
               8});
  v.push_back({"2D sub-block as subarray (same layout)", "2d",
               [] {
                 return subarray({512, 256}, {512, 64}, {0, 0}, MPI_DOUBLE);
               },
               8});
  v.push_back({"3D halo face x (128^3 double grid)", "3d",
               [] {
                 return subarray({128, 128, 128}, {128, 128, 1}, {0, 0, 0}, MPI_DOUBLE);
               },
               8});
  v.push_back({"3D halo face y (128^3 double grid)", "3d",
               [] {
                 return subarray({128, 128, 128}, {128, 1, 128}, {0, 0, 0}, MPI_DOUBLE);
               },
               8});
  v.push_back({"3D halo face z (128^3 double grid)", "3d",
               [] {
                 return subarray({128, 128, 128}, {1, 128, 128}, {0, 0, 0}, MPI_DOUBLE);
               },
               8});
  v.push_back({"4D subarray (16^4 float, inner 8^4 box)", "3d",
               [] {
                 return subarray({16, 16, 16, 16}, {8, 8, 8, 8}, {4, 4, 4, 4}, MPI_FLOAT);
               },
               256});
  v.push_back({"HAND indexed {2,2,2,2,3,4} at {1,10,18,26,40,56} float", "irregular",
               [] {
                 int bl[6] = {2, 2, 2, 2, 3, 4}, dp[6] = {1, 10, 18, 26, 40, 56};
                 MPI_Datatype t, r;
                 MPI_Type_indexed(6, bl, dp, MPI_FLOAT, &t);
                 MPI_Type_create_resized(t, 0, 64 * sizeof(float), &r);
                 MPI_Type_free(&t);
                 return commit(r);
               },
               16384});
  v.push_back({"indexed_block 4 x 3 double at {0,7,19,40}", "irregular",
               [] {
                 int dp[4] = {0, 7, 19, 40};
                 MPI_Datatype t;
                 MPI_Type_create_indexed_block(4, 3, dp, MPI_DOUBLE, &t);
                 return commit(t);
               },
               16384});
  v.push_back({"particle struct {pos[3] double, id int} of a 56 B particle", "struct",
               [] {
                 int bl[2] = {3, 1};
                 MPI_Aint dp[2] = {offsetof(Particle, pos), offsetof(Particle, id)};
                 MPI_Datatype ty[2] = {MPI_DOUBLE, MPI_INT}, t, r;
                 MPI_Type_create_struct(2, bl, dp, ty, &t);
                 MPI_Type_create_resized(t, 0, sizeof(Particle), &r);
                 MPI_Type_free(&t);
                 return commit(r);
               },
               65536});
  v.push_back(
      {"deep struct (struct of vector of hvector of indexed)", "struct", make_deep_struct, 4096});
  return v;
}

}  // namespace loom::tools
