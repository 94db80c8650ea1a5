// Internal to the trainer: a flat array of T in a backend's memory (host memory for the CPU
// backends, device memory for a CUDA backend), which the trainer holds its parameters,
// gradients, moments and activations in. The host never reads or writes the elements directly:
// every move goes through the backend (upload, download, copy_2d, fill), so the same trainer code
// runs on either kind of memory.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <wallfacer/runtime/backend.hpp>

namespace wallfacer::train {

template <typename T>
class BackendArray {
 public:
  explicit BackendArray(runtime::Backend& backend) : backend_(&backend) {}
  ~BackendArray() { clear(); }
  BackendArray(BackendArray&& o) noexcept : backend_(o.backend_), data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  BackendArray& operator=(BackendArray&& o) noexcept {
    if (this != &o) {
      clear();
      backend_ = o.backend_;
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  BackendArray(const BackendArray&) = delete;
  BackendArray& operator=(const BackendArray&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // `count` elements; their values are undefined unless the size was already `count`.
  void resize(int64_t count) {
    if (count == size_) return;
    clear();
    if (count > 0) data_ = static_cast<T*>(backend_->allocate(size_t(count) * sizeof(T)));
    size_ = count;
  }
  // `count` elements of `value`.
  void assign(int64_t count, T value) {
    resize(count);
    if (count > 0) backend_->fill(data_, runtime::elem_type_of<T>(), size_t(count), double(value));
  }
  // A copy of `other` (same backend).
  void copy_from(const BackendArray& other) {
    resize(other.size_);
    copy(data_, other.data_, size_);
  }
  void clear() {
    if (data_) backend_->release(data_);
    data_ = nullptr;
    size_ = 0;
  }
  // Between the host and the backend's memory.
  void upload(const std::vector<T>& host) {
    resize(int64_t(host.size()));
    if (size_ > 0) backend_->upload(data_, host.data(), size_t(size_) * sizeof(T));
  }
  void download(std::vector<T>& host) const {
    host.resize(size_t(size_));
    if (size_ > 0) backend_->download(host.data(), data_, size_t(size_) * sizeof(T));
  }

  // count elements from src to dst, both in the backend's memory.
  void copy(T* dst, const T* src, int64_t count) const {
    if (count > 0)
      backend_->copy_2d(dst, size_t(count) * sizeof(T), src, size_t(count) * sizeof(T), size_t(count) * sizeof(T), 1);
  }

 private:
  runtime::Backend* backend_;
  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace wallfacer::train
